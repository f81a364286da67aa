import { and, eq, inArray, sql } from 'drizzle-orm';
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

/**
 * @internal The SQL of the inbox: every statement inboxed runs, in one place, so the round trips
 * per message stay visible (claim, then the handler, then commit; a lookup only for duplicates).
 */
export class InboxStore {
  constructor(
    private readonly tables: InboxTables,
    private readonly consumer: string,
    private readonly lockTimeoutMs: number | null,
  ) {}

  /**
   * Claims ids with one `INSERT ... ON CONFLICT DO NOTHING RETURNING`: the unique key decides who
   * wins. A concurrent copy blocks here on the index until the holder commits (-> not returned,
   * a duplicate) or rolls back (-> claimed). Rows are optimistically written as `processed`; the
   * transaction makes that true or discards it. Returns the ids claimed.
   */
  async claim(tx: Queryable, rows: readonly ClaimRow[]): Promise<Set<string>> {
    const { inbox } = this.tables;
    const values = rows.map((row, index) => ({
      // The first row's consumer expression also sets lock_timeout for this transaction, so the
      // bounded wait costs no extra round trip. set_config is volatile: it runs before the row is
      // inserted, hence before any wait on the unique index.
      consumer: index === 0 && this.lockTimeoutMs !== null
        ? sql`(case when set_config('lock_timeout', ${String(this.lockTimeoutMs)}, true) is null then null else ${this.consumer} end)`
        : this.consumer,
      messageId: row.messageId,
      fingerprint: row.fingerprint,
      status: 'processed',
      source: row.source ?? null,
      ...(row.receivedAt === undefined ? {} : { receivedAt: row.receivedAt }),
    }));
    const claimed = await tx.insert(inbox).values(values).onConflictDoNothing().returning({ messageId: inbox.messageId });
    return new Set(claimed.map((r) => r.messageId));
  }

  /** Reads the committed rows of ids that could not be claimed. */
  async find(tx: Queryable, messageIds: readonly string[]): Promise<Map<string, ExistingRow>> {
    const { inbox } = this.tables;
    const rows = await tx
      .select({ messageId: inbox.messageId, fingerprint: inbox.fingerprint, status: inbox.status, reason: inbox.reason })
      .from(inbox)
      .where(and(eq(inbox.consumer, this.consumer), messageIds.length === 1 ? eq(inbox.messageId, messageIds[0]!) : inArray(inbox.messageId, [...messageIds])));
    return new Map(rows.map((r) => [r.messageId, r]));
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
