import { and, eq, sql, type SQL } from 'drizzle-orm';
import { getTableConfig } from 'drizzle-orm/pg-core';
import type { InboxTables } from './schema.js';
import type { AnyPgDatabase } from './types.js';

/** A row to claim. */
export interface ClaimRow {
  messageId: string;
  fingerprint: string | null;
  source: string | undefined;
  receivedAt: Date | undefined;
}

/** What the inbox already holds for a message id. */
export interface ExistingRow {
  messageId: string;
  fingerprint: string | null;
  status: string;
  reason: string | null;
}

/** The durable failure count of a message after recording one more failure. */
export interface AttemptRecord {
  attempts: number;
  firstAttemptAt: Date;
  lastAttemptAt: Date;
}

// Drizzle's transaction and database share the query-builder surface used here.
type Queryable = Pick<AnyPgDatabase, 'insert' | 'select' | 'update'>;
type Executable = Pick<AnyPgDatabase, 'execute'>;

/** Rows of a raw query on any driver: node-postgres and PGlite return `{ rows }`, postgres-js an array. */
async function rowsOf<T>(tx: Executable, query: SQL): Promise<T[]> {
  const result = (await tx.execute(query)) as unknown;
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[];
}

/**
 * @internal The SQL of the inbox: every statement inboxed runs, in one place, so the round trips
 * per message stay visible (claim, then the handler, then commit; a lookup only for duplicates).
 */
export class InboxStore {
  private readonly inboxName: SQL;
  private readonly consumerExpression: SQL;
  private readonly inboxNameText: string;

  constructor(
    private readonly tables: InboxTables,
    private readonly consumer: string,
    lockTimeoutMs: number | null,
  ) {
    const config = getTableConfig(tables.inbox);
    // Names were validated as plain identifiers when the tables were built.
    this.inboxNameText = config.schema === undefined ? `"${config.name}"` : `"${config.schema}"."${config.name}"`;
    this.inboxName = sql.raw(this.inboxNameText);
    // The consumer expression also sets lock_timeout for this transaction, so the bounded wait costs
    // no extra round trip. set_config is volatile: it runs before the row is inserted, hence before
    // any wait on the unique index. (lockTimeoutMs is a validated integer.)
    this.consumerExpression = lockTimeoutMs === null
      ? sql`${consumer}`
      : sql`(case when set_config('lock_timeout', '${sql.raw(String(lockTimeoutMs))}', true) is null then null else ${consumer}::text end)`;
  }

  /**
   * Claims ids with one `INSERT ... ON CONFLICT DO NOTHING RETURNING`: the unique key decides who
   * wins. A concurrent copy blocks here on the index until the holder commits (-> not returned,
   * a duplicate) or rolls back (-> claimed). Rows are optimistically written as `processed`; the
   * transaction makes that true or discards it. Returns the ids claimed.
   *
   * Hand-written SQL rather than the query builder: this runs once per message on the hot path,
   * and a batch passes its ids as arrays through `unnest`, so the statement has five parameters
   * whatever the batch size.
   */
  async claim(tx: Executable, rows: readonly ClaimRow[]): Promise<Set<string>> {
    const query = rows.length === 1
      ? sql`insert into ${this.inboxName} (consumer, message_id, fingerprint, status, source, received_at)
          values (${this.consumerExpression}, ${rows[0]!.messageId}, ${rows[0]!.fingerprint}, 'processed', ${rows[0]!.source ?? null}, coalesce(${rows[0]!.receivedAt?.toISOString() ?? null}::timestamptz, now()))
          on conflict do nothing returning message_id`
      : sql`insert into ${this.inboxName} (consumer, message_id, fingerprint, status, source, received_at)
          select ${this.consumerExpression}, m.id, m.fp, 'processed', m.src, coalesce(m.at::timestamptz, now())
          from unnest(${sql.param(rows.map((r) => r.messageId))}::text[], ${sql.param(rows.map((r) => r.fingerprint))}::text[],
                      ${sql.param(rows.map((r) => r.source ?? null))}::text[], ${sql.param(rows.map((r) => r.receivedAt?.toISOString() ?? null))}::text[]) as m(id, fp, src, at)
          on conflict do nothing returning message_id`;
    const claimed = await rowsOf<{ message_id: string }>(tx, query);
    return new Set(claimed.map((r) => r.message_id));
  }

  /**
   * The claim as one self-contained SQL text with inline literals, for drivers that can send it in
   * the same round trip as BEGIN (node-postgres' simple query protocol accepts several statements
   * but no parameters). `quote` must be the driver's own literal escaping.
   */
  claimText(rows: readonly ClaimRow[], quote: (value: string) => string, lockTimeoutMs: number | null): string {
    const literal = (value: string | null | undefined) => (value === null || value === undefined ? 'NULL' : quote(value));
    // Fingerprints (hex) and timestamps (ISO 8601) are produced here and hold no quote or
    // backslash, so they skip the per-character escaping that ids and sources need.
    const trusted = (value: string | null | undefined) => (value === null || value === undefined ? 'NULL' : `'${value}'`);
    // Same trick as the parameterised claim: set_config inside the statement bounds the wait on a
    // concurrent copy without a SET statement of its own.
    const consumer = lockTimeoutMs === null
      ? literal(this.consumer)
      : `(case when set_config('lock_timeout', '${lockTimeoutMs}', true) is null then null else ${literal(this.consumer)} end)`;
    const insert = `insert into ${this.inboxNameText} (consumer, message_id, fingerprint, status, source, received_at)`;
    const conflict = 'on conflict do nothing returning message_id';
    if (rows.length === 1) {
      const [row] = rows as [ClaimRow];
      const receivedAt = row.receivedAt === undefined ? 'now()' : `${trusted(row.receivedAt.toISOString())}::timestamptz`;
      return `${insert} values (${consumer}, ${literal(row.messageId)}, ${trusted(row.fingerprint)}, 'processed', ${literal(row.source)}, ${receivedAt}) ${conflict}`;
    }
    const array = (values: (string | null | undefined)[], quoteOne: typeof literal) => `ARRAY[${values.map(quoteOne).join(',')}]::text[]`;
    return `${insert} select ${consumer}, m.id, m.fp, 'processed', m.src, coalesce(m.at::timestamptz, now())
      from unnest(${array(rows.map((r) => r.messageId), literal)}, ${array(rows.map((r) => r.fingerprint), trusted)},
                  ${array(rows.map((r) => r.source), literal)}, ${array(rows.map((r) => r.receivedAt?.toISOString()), trusted)}) as m(id, fp, src, at)
      ${conflict}`;
  }

  /** Reads the committed rows of ids that could not be claimed. */
  async find(tx: Executable, messageIds: readonly string[]): Promise<Map<string, ExistingRow>> {
    const rows = await rowsOf<{ message_id: string; fingerprint: string | null; status: string; reason: string | null }>(
      tx,
      sql`select message_id, fingerprint, status, reason from ${this.inboxName}
          where consumer = ${this.consumer} and message_id = any(${sql.param([...messageIds])}::text[])`,
    );
    return new Map(rows.map((r) => [r.message_id, { messageId: r.message_id, fingerprint: r.fingerprint, status: r.status, reason: r.reason }]));
  }

  /** Turns a claimed row into a business rejection, in the claiming transaction. */
  async markRejected(tx: Queryable, messageId: string, reason: string): Promise<void> {
    const { inbox } = this.tables;
    await tx
      .update(inbox)
      .set({ status: 'rejected', reason, completedAt: sql`clock_timestamp()` })
      .where(and(eq(inbox.consumer, this.consumer), eq(inbox.messageId, messageId)));
  }

  /**
   * Counts one failed attempt, outside the rolled-back transaction, so the count survives restarts
   * and brokers that report no delivery count. Keeps the last error for inspection.
   */
  async recordFailure(db: Queryable, messageId: string, error: { message: string; code: string }): Promise<AttemptRecord> {
    const { inboxAttempts: attempts } = this.tables;
    const [row] = await db
      .insert(attempts)
      .values({ consumer: this.consumer, messageId, attempts: 1, lastError: error.message.slice(0, 4000), lastErrorCode: error.code })
      .onConflictDoUpdate({
        target: [attempts.consumer, attempts.messageId],
        set: {
          attempts: sql`${attempts.attempts} + 1`,
          lastAttemptAt: sql`now()`,
          lastError: sql`excluded.last_error`,
          lastErrorCode: sql`excluded.last_error_code`,
        },
      })
      .returning({ attempts: attempts.attempts, firstAttemptAt: attempts.firstAttemptAt, lastAttemptAt: attempts.lastAttemptAt });
    return row!;
  }
}
