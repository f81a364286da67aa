import { sql, type SQL } from 'drizzle-orm';
import { getTableConfig } from 'drizzle-orm/pg-core';
import { InboxErrorCodes } from './errors.js';
import { describeError, storableText } from './error-text.js';
import { qualifiedName } from './qualified-name.js';
import { rowsIn, rowsOf } from './query-rows.js';
import type { InboxTables } from './schema.js';
import type { AnyPgDatabase } from './types.js';

/** A row to claim. */
export interface ClaimRow {
  messageId: string;
  fingerprint: string | null;
  source: string | undefined;
  receivedAt: Date | undefined;
}

/**
 * What a claim won: the ids, and where PostgreSQL put their rows (`ctid`, as text), so the
 * completion check can find them again without an index probe per id.
 */
export interface Claimed {
  ids: Set<string>;
  /** The claimed rows' tuple ids, as the claim returned them (empty when unknown). */
  tids: string[];
}

/** A tuple id as PostgreSQL prints one, `(block,offset)`: the only text the check inlines unquoted. */
const TID = /^\(\d+,\d+\)$/;

/** The ids and tuple ids of the claim's returned rows. */
export function claimedOf(rows: readonly { message_id: string; tid?: unknown }[]): Claimed {
  const tids: string[] = [];
  for (const row of rows) if (typeof row.tid === 'string' && TID.test(row.tid)) tids.push(row.tid);
  return { ids: new Set(rows.map((r) => r.message_id)), tids };
}

/**
 * What the completion check must find: the rows this transaction claimed, with their tuple ids, or
 * when it claimed none, the ids of a claim committed earlier (`verifyIds`, the leased completion),
 * looked up by key.
 */
export function checkTargets(claimed: Claimed, verifyIds: readonly string[] | undefined): { ids: string[]; tids: readonly string[] } {
  return claimed.ids.size > 0 ? { ids: [...claimed.ids], tids: claimed.tids } : { ids: [...(verifyIds ?? [])], tids: [] };
}

/** What the inbox already holds for a message id. */
export interface ExistingRow {
  messageId: string;
  fingerprint: string | null;
  status: string;
  reason: string | null;
  /** The stored result as JSON text, if the handler stored one. */
  result: string | null;
  /** For a leased `processing` claim: ms left on its lease by the server's clock (0 once expired); null when it has none. */
  leaseRemainingMs: number | null;
}

/** The durable failure count of a message after recording one more failure. */
export interface AttemptRecord {
  attempts: number;
  firstAttemptAt: Date;
  lastAttemptAt: Date;
}

/** @internal One of the store's own statements inside the inbox transaction failed (not the handler). */
export class InboxStatementError extends Error {
  constructor(
    readonly statement: 'find' | 'reject' | 'result' | 'complete',
    readonly original: unknown,
  ) {
    super(`inbox ${statement} statement failed: ${describeError(original)}`, { cause: original });
    this.name = 'InboxStatementError';
  }
}

/** The error an attempt counted before it ran carries until it ends otherwise (see `startAttempt`). */
const UNFINISHED_CODE = InboxErrorCodes.ATTEMPT_UNFINISHED;
const UNFINISHED_TEXT = 'an attempt started on a redelivery and ended without an outcome (the process died or was killed while processing?)';

/**
 * @internal The claim found an id's row, and the read right after found none: retention deleted it
 * in between (nothing else deletes inbox rows). The id is new again, so the whole transaction is
 * run again, like one hit by a serialization failure, and then claims it; not an inbox query failure.
 */
export class ClaimRaceError extends Error {
  constructor(messageId: string) {
    super(`the inbox row of ${JSON.stringify(messageId)} was deleted (by retention) between the claim and its read`);
    this.name = 'ClaimRaceError';
  }
}

/**
 * The marker the completion check raises when the claimed rows are not (all) in the current
 * transaction. Plain SQL has no RAISE, so the check casts a text carrying this marker to an integer
 * only in that case; the cast error is recognised by the marker, never by its SQLSTATE.
 */
export const CLAIM_LOST_MARKER = 'inboxed:claim-lost';

// Drizzle's transaction and database share the query-builder surface used here.
type Queryable = Pick<AnyPgDatabase, 'insert' | 'select' | 'update'>;
type Executable = Pick<AnyPgDatabase, 'execute'>;

/**
 * Sent right before the completion check when it reads rows by tuple id: `SET LOCAL enable_seqscan =
 * off`, as a function call. PostgreSQL costs a TID scan as one random page read per row, so up to
 * some 15,000 rows it would rather read the whole inbox: every batch's check would then scan the
 * table. A local setting ends with the transaction, and the check is its last statement before
 * COMMIT, so nothing of the handler's is planned under it; the index probes the check may fall back
 * to are index scans, which it leaves alone. In a transaction the handler already broke, it fails
 * (aborted) or does nothing (ended) exactly as the check would. `set_config(..., true)` rather than
 * the `SET LOCAL` statement because, outside a transaction block, the statement makes the server
 * send a WARNING, which postgres-js prints to the console by default; the function is silent.
 */
const TID_SCAN_ONLY = "select set_config('enable_seqscan', 'off', true)";

/**
 * The completion check's verdict on `found` (an SQL expression: how many of the `n` claimed rows are
 * there): 0 when all are, inside an open transaction; otherwise an error whose text carries
 * {@link CLAIM_LOST_MARKER}, `found/n`, and whether a transaction was open at all. Every form of the
 * check (one message or a batch, parameterised or inline) ends in this one expression.
 */
function verdictText(found: string, n: number): string {
  return `case when ${found} = ${n} and txid_current_if_assigned() is not null then 0
      else ('${CLAIM_LOST_MARKER} ' || ${found} || '/${n}' || case when txid_current_if_assigned() is null then ' (no transaction)' else '' end)::int end`;
}

/** The `xid` column of the completion check's row, when it was asked for (see {@link InboxStore.verify}). */
function xidIn(result: unknown): string | null {
  const xid = rowsIn<{ xid?: unknown }>(result)[0]?.xid;
  return typeof xid === 'string' ? xid : null;
}

/** A SQL literal quoted by the driver's own escaping (node-postgres' `escapeLiteral`). */
export type Quote = (value: string) => string;

/**
 * @internal The SQL of the inbox: every statement inboxed runs, in one place, so the round trips
 * per message stay visible. Per message: BEGIN + claim (one round trip on node-postgres), the
 * handler's own statements, then the completion check + COMMIT (one round trip on node-postgres);
 * a lookup only for duplicates.
 *
 * Statements that run on the hot path exist twice, side by side: as inline-literal text for
 * node-postgres, whose simple query protocol sends several statements in one round trip but takes
 * no parameters, and as parameterised SQL for the other drivers.
 */
export class InboxStore {
  private inboxName: SQL;
  private inboxNameText: string;
  /** Whether the inbox's name carries its schema (given, or found by {@link pinSchema}). */
  private pinned: boolean;
  /**
   * Whether the claim returns tuple ids and the completion check looks the rows up by them: once
   * {@link pinSchema} found the inbox to be a plain table whose `ctid` can be read. Until then, and
   * for a partitioned inbox (its partitions repeat tuple ids) or an engine without `ctid`, the claim
   * returns ids only and the check probes the index.
   */
  private byTupleId: boolean | undefined;
  private pinning: Promise<void> | undefined;

  constructor(
    private readonly tables: InboxTables,
    private readonly consumer: string,
  ) {
    const config = getTableConfig(tables.inbox);
    this.inboxNameText = qualifiedName(tables.inbox);
    this.inboxName = sql.raw(this.inboxNameText);
    this.pinned = config.schema !== undefined;
  }

  /**
   * The claim's second returned column, the rows' tuple ids, when the check will use them: for a
   * batch of two or more (one message is checked by its unique key, see {@link verify}).
   */
  private get tidColumn(): string {
    return this.byTupleId === true ? ', ctid::text as tid' : '';
  }

  /** The inbox table's qualified name (schema-pinned once {@link pinSchema} found it), for the leased-mode statements. */
  get inboxTable(): SQL {
    return this.inboxName;
  }

  /** The attempts table, for the leased claim's look at the attempts already counted. */
  get attemptsTable(): InboxTables['inboxAttempts'] {
    return this.tables.inboxAttempts;
  }

  /**
   * Looks the inbox table up once, before its first transaction, for two things:
   * - Without a schema option the inbox is found through `search_path`. A handler may change that
   *   inside the transaction (schema-per-tenant applications do: `SET LOCAL search_path`), and the
   *   statements that follow it (rejection, completion check) must still reach the table the claim
   *   used. So the schema the table is found in is written into every statement from then on.
   * - Whether it is a plain table with readable tuple ids, which decides how the completion check
   *   finds the claimed rows (see {@link verify}).
   * Until the table exists this looks again each time; a failure here is left to the claim to report.
   */
  async pinSchema(db: Executable): Promise<void> {
    if (this.pinned && this.byTupleId !== undefined) return;
    this.pinning ??= (async () => {
      try {
        const [row] = await rowsOf<{ schema: string | null; kind: string | null }>(
          db,
          sql`select n.nspname as schema, c.relkind::text as kind from pg_class c
          join pg_namespace n on n.oid = c.relnamespace where c.oid = to_regclass(${this.inboxNameText})`,
        );
        if (typeof row?.schema === 'string' && !this.pinned) {
          this.inboxNameText = `"${row.schema.replaceAll('"', '""')}".${this.inboxNameText}`;
          this.inboxName = sql.raw(this.inboxNameText);
          this.pinned = true;
        }
        if (row?.kind === 'r') {
          // PostgreSQL-compatible engines without tuple ids (CockroachDB, for one) refuse this.
          const readable = await rowsOf(db, sql.raw(`select ctid::text from ${this.inboxNameText} where false`)).then(
            () => true,
            () => false,
          );
          this.byTupleId = readable;
        } else if (typeof row?.kind === 'string') {
          this.byTupleId = false;
        }
      } catch {
        // The claim runs next and reports an unreachable database or missing table properly.
      } finally {
        this.pinning = undefined;
      }
    })();
    await this.pinning;
  }

  /**
   * The consumer column of the claim, written so that evaluating it bounds the claim's wait on a
   * concurrent copy, and only that wait: it saves the session's `lock_timeout` in a
   * transaction-local setting, then sets `lockTimeoutMs`. The CASE evaluates its branches in order,
   * before the row is inserted, hence before any wait on the unique index; {@link restoreText} puts
   * the saved value back before the handler runs, so the handler's own lock waits keep the
   * session's setting. (`lockTimeoutMs` is a validated integer.)
   */
  private boundConsumer(consumer: string, lockTimeoutMs: number | null): string {
    if (lockTimeoutMs === null) return consumer;
    return `case when set_config('inboxed.lock_timeout', current_setting('lock_timeout'), true) is null then null
      when set_config('lock_timeout', '${lockTimeoutMs}', true) is null then null else ${consumer}::text end`;
  }

  /** Puts back the `lock_timeout` saved by {@link boundConsumer}. */
  private restoreText(): string {
    return `set_config('lock_timeout', current_setting('inboxed.lock_timeout'), true)`;
  }

  /**
   * Claims ids with one `INSERT ... ON CONFLICT DO NOTHING RETURNING`: the unique key decides who
   * wins. A concurrent copy blocks here on the index until the holder commits (-> not returned,
   * a duplicate) or rolls back (-> claimed). Rows are optimistically written as `processed`; the
   * transaction makes that true or discards it. Returns the ids claimed.
   *
   * The wait bound costs no statement of its own: it is part of the consumer value, and a single
   * claim puts the setting back in its RETURNING (evaluated after the insert and its waits; when the
   * id is a duplicate nothing is returned, but then no handler runs). A batch evaluates the bound
   * once (an uncorrelated scalar subquery) and puts it back with a separate statement, sent without
   * waiting (postgres-js pipelines it). A batch passes its ids as arrays through `unnest`, so the
   * statement has few parameters whatever its size.
   */
  async claim(tx: Executable, rows: readonly ClaimRow[], lockTimeoutMs: number | null): Promise<Claimed> {
    if (rows.length === 0) return { ids: new Set(), tids: [] };
    // The same expression as boundConsumer, with the consumer as a parameter.
    const bound =
      lockTimeoutMs === null
        ? sql`${this.consumer}`
        : sql`(case when set_config('inboxed.lock_timeout', current_setting('lock_timeout'), true) is null then null
      when set_config('lock_timeout', ${sql.raw(`'${lockTimeoutMs}'`)}, true) is null then null else ${this.consumer}::text end)`;
    if (rows.length === 1) {
      const [row] = rows as [ClaimRow];
      const restore = lockTimeoutMs === null ? sql`` : sql.raw(`, ${this.restoreText()}`);
      const insert = sql`insert into ${this.inboxName} (consumer, message_id, fingerprint, status, source, received_at)
          values (${bound}, ${row.messageId}, ${row.fingerprint}, 'processed', ${row.source ?? null}, coalesce(${row.receivedAt?.toISOString() ?? null}::timestamptz, now()))
          on conflict do nothing returning message_id${restore}`;
      return claimedOf(await rowsOf<{ message_id: string; tid: unknown }>(tx, insert));
    }
    const insert = sql`insert into ${this.inboxName} (consumer, message_id, fingerprint, status, source, received_at)
          select (select ${bound}), m.id, m.fp, 'processed', m.src, coalesce(m.at::timestamptz, now())
          from unnest(${sql.param(rows.map((r) => r.messageId))}::text[], ${sql.param(rows.map((r) => r.fingerprint))}::text[],
                      ${sql.param(rows.map((r) => r.source ?? null))}::text[], ${sql.param(rows.map((r) => r.receivedAt?.toISOString() ?? null))}::text[]) as m(id, fp, src, at)
          on conflict do nothing returning message_id${sql.raw(this.tidColumn)}`;
    if (lockTimeoutMs === null) return claimedOf(await rowsOf<{ message_id: string; tid: unknown }>(tx, insert));
    const [claimed] = await Promise.all([rowsOf<{ message_id: string; tid: unknown }>(tx, insert), rowsOf(tx, sql.raw(`select ${this.restoreText()}`))]);
    return claimedOf(claimed);
  }

  /**
   * The claim of {@link claim} as self-contained SQL text with inline literals, restoring the lock
   * wait included, for node-postgres to send in one round trip after BEGIN. Its first result holds
   * the claimed ids and their tuple ids (see {@link claimedOf}). `quote` must be the driver's own literal escaping.
   */
  claimText(rows: readonly ClaimRow[], quote: Quote, lockTimeoutMs: number | null): string {
    // Nothing to claim (the leased completion): an empty result in the claim's place after BEGIN.
    if (rows.length === 0) return 'select null::text as message_id, null::text as tid where false';
    const literal = (value: string | null | undefined) => (value === null || value === undefined ? 'NULL' : quote(value));
    // Fingerprints (hex) and timestamps (ISO 8601) are produced here and hold no quote or
    // backslash, so they skip the per-character escaping that ids and sources need.
    const trusted = (value: string | null | undefined) => (value === null || value === undefined ? 'NULL' : `'${value}'`);
    const consumer = this.boundConsumer(literal(this.consumer), lockTimeoutMs);
    const insert = `insert into ${this.inboxNameText} (consumer, message_id, fingerprint, status, source, received_at)`;
    if (rows.length === 1) {
      const [row] = rows as [ClaimRow];
      const receivedAt = row.receivedAt === undefined ? 'now()' : `${trusted(row.receivedAt.toISOString())}::timestamptz`;
      const restore = lockTimeoutMs === null ? '' : `, ${this.restoreText()}`;
      return `${insert} values (${consumer}, ${literal(row.messageId)}, ${trusted(row.fingerprint)}, 'processed', ${literal(row.source)}, ${receivedAt}) on conflict do nothing returning message_id${restore}`;
    }
    const conflict = `on conflict do nothing returning message_id${this.tidColumn}`;
    const array = (values: (string | null | undefined)[], quoteOne: typeof literal) => `ARRAY[${values.map(quoteOne).join(',')}]::text[]`;
    const ids = array(
      rows.map((r) => r.messageId),
      literal,
    );
    const fingerprints = array(
      rows.map((r) => r.fingerprint),
      trusted,
    );
    const sources = array(
      rows.map((r) => r.source),
      literal,
    );
    const receivedAts = array(
      rows.map((r) => r.receivedAt?.toISOString()),
      trusted,
    );
    const text = `${insert} select (select ${consumer}), m.id, m.fp, 'processed', m.src, coalesce(m.at::timestamptz, now())
      from unnest(${ids}, ${fingerprints}, ${sources}, ${receivedAts}) as m(id, fp, src, at) ${conflict}`;
    return lockTimeoutMs === null ? text : `${text}; select ${this.restoreText()}`;
  }

  /**
   * The completion check, run right before COMMIT: every claimed row must still be there, inside a
   * transaction that is still open. It fails, so COMMIT never runs, when
   * - a statement of the handler failed and the handler carried on: PostgreSQL aborted the
   *   transaction, and this check gets SQLSTATE 25P02 (COMMIT alone would answer `ROLLBACK`
   *   without an error, which node-postgres does not report);
   * - the handler sent ROLLBACK or COMMIT itself: the rows are gone, or no transaction is open
   *   (`txid_current_if_assigned()` is null in the implicit transaction of a lone statement);
   * - the handler deleted the rows it runs under.
   * In the last two cases the check raises {@link CLAIM_LOST_MARKER}.
   *
   * One message is checked by its unique key alone: a single index probe, in the flattest statement
   * that gives the verdict and the error (an aggregate over the table, no subquery), because its
   * planning is most of what the check costs in a one-message transaction. Measured with pgbench, it
   * cost half as much as the TID scan below with its setting and its lazy fallback.
   *
   * A batch's rows are first looked for where the claim put them: a TID scan of the claim's `ctid`s,
   * counting only rows that still carry a claimed id of this consumer. No other transaction can move
   * or remove a row this transaction inserted and has not committed, so the rows are found there
   * unless this transaction updated them itself (a rejection or a stored result moves a row) or they
   * are gone. Only then, and for the leased completion (its claim committed earlier), are the ids
   * looked up by the unique index, one probe each (a LATERAL subquery with LIMIT, which the planner
   * cannot flatten: with `message_id = any(...)`, a table without statistics yet is planned as a scan
   * of all the consumer's rows). The probes sit in the ELSE branch, an uncorrelated subquery that
   * PostgreSQL runs only when it is reached (and plans once, for both the verdict and the error), so
   * they cost nothing when the TID scan found every row. The id filter keeps the fast path exactly as strict as the
   * probes: each counted row is a distinct claimed id (the unique key). It sits above an `OFFSET 0`
   * fence so the planner cannot turn `consumer = $1` into an index scan of all the consumer's rows
   * (the same misestimate as above); below it, `ctid = any(...)` leaves a TID scan or a sequential
   * scan, and {@link TID_SCAN_ONLY} rules the latter out. A partitioned inbox is always probed: every partition
   * repeats the same tuple ids, so a TID scan of the parent visits each partition, and the planner
   * reads moderately sized partitions whole instead. So is an inbox on an engine without `ctid`
   * (see {@link pinSchema}); the claim then returns no tuple ids at all.
   */
  verify(tx: Executable, messageIds: readonly string[], claimedTids: readonly string[] = [], reportXid = false): Promise<string | null> {
    const n = messageIds.length;
    // The transaction's id, for a driver that does not say whether COMMIT committed (see drivers/drizzle.ts).
    const xid = reportXid ? sql`, pg_current_xact_id_if_assigned()::text as xid` : sql``;
    const answer = reportXid ? xidIn : () => null;
    if (n === 1) {
      return tx
        .execute(
          sql`select ${sql.raw(verdictText('count(*)', 1))} as verdict${xid} from ${this.inboxName} where consumer = ${this.consumer} and message_id = ${messageIds[0]!}`,
        )
        .then(answer);
    }
    const tids = this.byTupleId === true ? claimedTids : [];
    const ids = sql`${sql.param([...messageIds])}::text[]`;
    const probes = sql`(select count(*) from unnest(${ids}) as m(id)
            cross join lateral (select 1 from ${this.inboxName} i where i.consumer = ${this.consumer} and i.message_id = m.id limit 1) as hit)`;
    const inPlace =
      tids.length === 0
        ? sql`false`
        : sql`(select count(*) from (select consumer, message_id from ${this.inboxName} where ctid = any(${sql.param([...tids])}::text[]::tid[]) offset 0) as here
            where here.consumer = ${this.consumer} and here.message_id = any(${ids})) = ${n}`;
    const check = sql`select case when txid_current_if_assigned() is not null and ${inPlace} then 0
        else (select ${sql.raw(verdictText('probed.found', n))} from ${probes} as probed(found)) end as verdict${xid}`;
    if (tids.length === 0) return tx.execute(check).then(answer);
    // Sent together (postgres-js pipelines them); see TID_SCAN_ONLY.
    return Promise.all([tx.execute(sql.raw(TID_SCAN_ONLY)), tx.execute(check)]).then(([, checked]) => answer(checked));
  }

  /**
   * Whether the transaction `xid` (from {@link verify}) committed, asked after its COMMIT: `true`
   * committed, `false` rolled back. Only the server's commit log answers this for one transaction;
   * reading the claimed rows back would also find rows a concurrent copy committed.
   */
  async committed(db: Executable, xid: string): Promise<boolean> {
    const [row] = await rowsOf<{ status: string | null }>(db, sql`select pg_xact_status(${xid}::xid8) as status`);
    if (row?.status === 'committed') return true;
    if (row?.status === 'aborted') return false;
    throw new Error(`pg_xact_status(${xid}) answered ${String(row?.status)} after COMMIT`);
  }

  /** {@link verify} as inline-literal text, to send in one round trip with COMMIT. */
  verifyText(messageIds: readonly string[], claimedTids: readonly string[], quote: Quote): string {
    const n = messageIds.length;
    const consumer = quote(this.consumer);
    if (n === 1) {
      return `select ${verdictText('count(*)', 1)} from ${this.inboxNameText} where consumer = ${consumer} and message_id = ${quote(messageIds[0]!)}`;
    }
    const tids = this.byTupleId === true ? claimedTids : [];
    const ids = `ARRAY[${messageIds.map(quote).join(',')}]::text[]`;
    const probes = `(select count(*) from unnest(${ids}) as m(id)
            cross join lateral (select 1 from ${this.inboxNameText} i where i.consumer = ${consumer} and i.message_id = m.id limit 1) as hit)`;
    // Tuple ids are the server's own output, checked against TID by claimedOf.
    const tidList = `ARRAY[${tids.map((tid) => `'${tid}'`).join(',')}]::tid[]`;
    const inPlace =
      tids.length === 0
        ? 'false'
        : `(select count(*) from (select consumer, message_id from ${this.inboxNameText} where ctid = any(${tidList}) offset 0) as here
            where here.consumer = ${consumer} and here.message_id = any(${ids})) = ${n}`;
    const check = `select case when txid_current_if_assigned() is not null and ${inPlace} then 0
        else (select ${verdictText('probed.found', n)} from ${probes} as probed(found)) end`;
    return tids.length === 0 ? check : `${TID_SCAN_ONLY}; ${check}`;
  }

  /** `unnest` of ids as `m(id)`, for the LATERAL lookups of {@link find}. */
  private ids(messageIds: readonly string[]): SQL {
    return sql`unnest(${sql.param([...messageIds])}::text[]) as m(id)`;
  }

  /** Reads the committed rows of ids that could not be claimed. */
  async find(tx: Executable, messageIds: readonly string[]): Promise<Map<string, ExistingRow>> {
    type Row = { message_id: string; fingerprint: string | null; status: string; reason: string | null; result: string | null; lease_ms: number | null };
    let rows: Row[];
    try {
      // One index probe per id, whatever the table's statistics say (see verify).
      rows = await rowsOf(
        tx,
        sql`select i.message_id, i.fingerprint, i.status, i.reason, i.result,
            case when i.lease_expires_at is null then null
                 else greatest(0, ceil(extract(epoch from (i.lease_expires_at - now())) * 1000))::float8 end as lease_ms
          from ${this.ids(messageIds)}
          cross join lateral (select message_id, fingerprint, status, reason, result, lease_expires_at from ${this.inboxName} i
                              where i.consumer = ${this.consumer} and i.message_id = m.id limit 1) as i`,
      );
    } catch (error) {
      throw new InboxStatementError('find', error);
    }
    return new Map(
      rows.map((r) => [
        r.message_id,
        {
          messageId: r.message_id,
          fingerprint: r.fingerprint,
          status: r.status,
          reason: r.reason,
          result: r.result,
          leaseRemainingMs: r.lease_ms === null ? null : Number(r.lease_ms),
        },
      ]),
    );
  }

  /** Records the handler's stored result (JSON text) on a claimed row, in the claiming transaction. */
  async markResult(tx: Executable, messageId: string, json: string): Promise<void> {
    try {
      await tx.execute(sql`update ${this.inboxName} set result = ${json} where consumer = ${this.consumer} and message_id = ${messageId}`);
    } catch (error) {
      throw new InboxStatementError('result', error);
    }
  }

  /** Turns a claimed row into a business rejection, in the claiming transaction. */
  async markRejected(tx: Executable, messageId: string, reason: string): Promise<void> {
    try {
      await tx.execute(sql`update ${this.inboxName} set status = 'rejected', reason = ${reason}, completed_at = clock_timestamp()
        where consumer = ${this.consumer} and message_id = ${messageId}`);
    } catch (error) {
      throw new InboxStatementError('reject', error);
    }
  }

  /**
   * Counts an attempt before it runs, in a statement of its own, unless the id is already in the
   * inbox (then it is a duplicate and nothing runs). Says which, and the attempts counted now, this
   * one included (`null` when nothing was counted). See `unfinished-attempts.ts`.
   */
  async startAttempt(db: Executable, messageId: string): Promise<{ known: boolean; counted: number | null }> {
    const attempts = sql.raw(qualifiedName(this.tables.inboxAttempts));
    const [row] = await rowsOf<{ known: boolean; attempts: number | null }>(
      db,
      sql`with known as (select 1 from ${this.inboxName} where consumer = ${this.consumer} and message_id = ${messageId}),
        counted as (
          insert into ${attempts} as a (consumer, message_id, attempts, last_error, last_error_code)
          select ${this.consumer}, ${messageId}, 1, ${UNFINISHED_TEXT}, ${UNFINISHED_CODE}
          where not exists (select 1 from known)
          on conflict (consumer, message_id) do update set attempts = a.attempts + 1, last_attempt_at = now()
          returning attempts)
        select exists (select 1 from known) as known, (select attempts from counted) as attempts`,
    );
    const counted = row?.attempts === null || row?.attempts === undefined ? null : Number(row.attempts);
    return { known: row?.known === true, counted };
  }

  /**
   * Counts the first attempt of each of many distinct ids, in their order, up to the first that has
   * an attempts record (a redelivery that failed or died before: counted later, by
   * {@link startAttempt} at its turn), in one statement: each id before it that is neither in the
   * inbox nor recorded. Per id: `decided` (false after that first recorded id: nothing was looked at
   * for it, ask again once the ids before it ran), `known` (in the inbox), and the attempts counted
   * now (`null` when nothing was counted: known, recorded or not decided). Counting no further than
   * the first recorded id means no attempt is counted while an earlier one of the batch runs alone.
   * Each id is one index probe (correlated subqueries, whatever the statistics say; see verify),
   * and the inserts go in id order, so two batches counting overlapping ids cannot deadlock.
   */
  async startFirstAttempts(db: Executable, messageIds: readonly string[]): Promise<Map<string, { decided: boolean; known: boolean; counted: number | null }>> {
    const attempts = sql.raw(qualifiedName(this.tables.inboxAttempts));
    const rows = await rowsOf<{ message_id: string; decided: boolean; known: boolean; attempts: number | null }>(
      db,
      sql`with m as (
          select m.id, m.ord,
            exists (select 1 from ${this.inboxName} i where i.consumer = ${this.consumer} and i.message_id = m.id) as known,
            exists (select 1 from ${attempts} r where r.consumer = ${this.consumer} and r.message_id = m.id) as recorded
          from unnest(${sql.param([...messageIds])}::text[]) with ordinality as m(id, ord)),
        cut as (select coalesce(min(ord), 9223372036854775807) as ord from m where not m.known and m.recorded),
        counted as (
          insert into ${attempts} as a (consumer, message_id, attempts, last_error, last_error_code)
          select ${this.consumer}, m.id, 1, ${UNFINISHED_TEXT}, ${UNFINISHED_CODE} from m
          where not m.known and not m.recorded and m.ord < (select ord from cut) order by m.id
          on conflict (consumer, message_id) do update set attempts = a.attempts + 1, last_attempt_at = now()
          returning message_id, attempts)
        select m.id as message_id, m.ord <= (select ord from cut) as decided, m.known, counted.attempts
        from m left join counted on counted.message_id = m.id`,
    );
    return new Map(
      rows.map((r) => [r.message_id, { decided: r.decided === true, known: r.known === true, counted: r.attempts === null ? null : Number(r.attempts) }]),
    );
  }

  /**
   * Takes back an attempt {@link startAttempt} counted, when it ended without failing: the record
   * goes when nothing else is left on it. Never rejects: if the database went away just then, the
   * message keeps one attempt more than it used, which costs one attempt of its budget and never
   * an outcome, so it is not worth failing a settled message for.
   */
  uncountAttempt(db: Executable, messageId: string): Promise<void> {
    return this.uncountAttempts(db, [messageId]);
  }

  /** {@link uncountAttempt} for many ids, in one statement. */
  async uncountAttempts(db: Executable, messageIds: readonly string[]): Promise<void> {
    if (messageIds.length === 0) return;
    const attempts = sql.raw(qualifiedName(this.tables.inboxAttempts));
    const ids = sql`${sql.param([...messageIds])}::text[]`;
    try {
      // Decided on the rows as locked, not as this statement's snapshot saw them: two copies taking
      // back their counts of one id at once would otherwise both see 2, and the second, waiting on
      // the first, would find 1 > 1 false and leave a count behind. FOR UPDATE returns the newest
      // version once the other copy committed, and locks in id order (no deadlock between batches).
      // Disjoint rows (attempts <= 1 or > 1), so the delete and the update never touch the same row.
      await db.execute(sql`with locked as (select message_id, attempts from ${attempts}
          where consumer = ${this.consumer} and message_id = any(${ids}) order by message_id for update),
        gone as (delete from ${attempts} a using locked where a.consumer = ${this.consumer} and a.message_id = locked.message_id and locked.attempts <= 1 returning 1)
        update ${attempts} a set attempts = locked.attempts - 1 from locked
          where a.consumer = ${this.consumer} and a.message_id = locked.message_id and locked.attempts > 1`);
    } catch {
      // Deliberately not raised: see above.
    }
  }

  /**
   * Counts one failed attempt, outside the rolled-back transaction, so the count survives restarts
   * and brokers that report no delivery count. Keeps the last error for inspection: its description
   * (never query parameters) and code, both made storable, so recording a failure cannot itself fail
   * on what the failure said.
   */
  async recordFailure(db: Queryable, messageId: string, error: { message: string; code: string }, counted = false): Promise<AttemptRecord> {
    const { inboxAttempts: attempts } = this.tables;
    const [row] = await db
      .insert(attempts)
      .values({ consumer: this.consumer, messageId, attempts: 1, lastError: storableText(error.message, 4000), lastErrorCode: storableText(error.code, 100) })
      .onConflictDoUpdate({
        target: [attempts.consumer, attempts.messageId],
        set: {
          // `counted`: startAttempt counted this attempt already; only its error is recorded here.
          attempts: counted ? sql`${attempts.attempts}` : sql`${attempts.attempts} + 1`,
          lastAttemptAt: sql`now()`,
          lastError: sql`excluded.last_error`,
          lastErrorCode: sql`excluded.last_error_code`,
        },
      })
      .returning({ attempts: attempts.attempts, firstAttemptAt: attempts.firstAttemptAt, lastAttemptAt: attempts.lastAttemptAt });
    return row!;
  }
}
