import { sql, type SQL } from 'drizzle-orm';
import { InboxError, InboxErrorCodes } from './errors.js';
import { getTableConfig } from 'drizzle-orm/pg-core';
import { adminKey, adminOperation } from './admin/admin-sql.js';
import { qualifiedName } from './qualified-name.js';
import { rowsIn } from './query-rows.js';
import { createInboxTables, type InboxTableNames, type InboxTables } from './schema.js';
import type { AnyPgDatabase } from './types.js';

/** Options of {@link purgeInbox}. */
export interface PurgeOptions {
  /**
   * Delete completed rows older than this many milliseconds. Must exceed the longest window in
   * which a copy of a message can still arrive (broker retention, redelivery, manual replay): a
   * purged id is new again, and its effect would be applied a second time. The broker consumers'
   * retention guard (`inboxRetentionMs`) checks it against what the broker reports.
   */
  olderThanMs: number;
  /** Only this consumer's rows. Default: every consumer. */
  consumer?: string;
  /** Rows deleted per statement, so a purge never holds long locks. Default 1000. */
  batchSize?: number;
  /** Stop after this many batches per table (to bound one call). Default: until nothing is left. */
  maxBatches?: number;
  /** The inbox tables. Default `public.inbox`. */
  tables?: InboxTableNames | InboxTables;
}

/** What one purge deleted. */
export interface PurgeResult {
  /** Inbox rows deleted. */
  deleted: number;
  /** Attempts records deleted (failures of messages last tried before the window). */
  attemptsDeleted: number;
}

/** The longest retention window accepted: 100 years, in ms. */
const LONGEST_WINDOW_MS = 3_155_760_000_000;

/**
 * @internal A retention window (`olderThanMs`) as whole milliseconds, or `INVALID_OPTIONS`: a
 * positive number up to 100 years. Fractions are rounded down (at least 1 ms).
 */
export function retentionWindow(olderThanMs: unknown): number {
  if (typeof olderThanMs !== 'number' || !Number.isFinite(olderThanMs) || olderThanMs < 1 || olderThanMs > LONGEST_WINDOW_MS)
    throw new InboxError(
      InboxErrorCodes.INVALID_OPTIONS,
      `olderThanMs must be a number of milliseconds from 1 to ${LONGEST_WINDOW_MS} (100 years); got ${String(olderThanMs)}`,
    );
  return Math.floor(olderThanMs);
}

/** @internal `now()` minus a window from {@link retentionWindow}, in server time. */
export function cutoffOf(windowMs: number): SQL {
  return sql`now() - ${sql.raw(String(windowMs))}::bigint * interval '1 millisecond'`;
}

/**
 * @internal The inbox rows a purge may delete once they are old enough: every row but an open
 * leased claim whose lease is still live. A released claim (`lease_expires_at` null) is not live:
 * without the coalesce the comparison would be null and such rows were kept for ever.
 */
export const WITHOUT_LIVE_LEASE = sql`not (status = 'processing' and coalesce(lease_expires_at > now(), false))`;

/** @internal Validated purge settings, shared by {@link purgeInbox} and the retention scheduler. */
export interface PurgePlan {
  tables: InboxTables;
  olderThanMs: number;
  consumer: string | undefined;
  batchSize: number;
  maxBatches: number;
}

/** @internal */
export function planPurge(options: PurgeOptions): PurgePlan {
  const { batchSize = 1000, maxBatches = Number.POSITIVE_INFINITY } = options;
  const olderThanMs = retentionWindow(options.olderThanMs);
  if (options.consumer !== undefined) adminKey(options.consumer, 'consumer');
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'batchSize must be an integer >= 1');
  if (maxBatches !== Number.POSITIVE_INFINITY && (!Number.isInteger(maxBatches) || maxBatches < 1))
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'maxBatches must be an integer >= 1');
  const tables = options.tables !== undefined && 'inbox' in options.tables ? options.tables : createInboxTables(options.tables);
  return { tables, olderThanMs, consumer: options.consumer, batchSize, maxBatches };
}

/**
 * @internal The two bounded deletes of a purge, one batch each: at most `batchSize` rows, chosen by
 * an index (inbox: `completed_at`) or a scan that stops at `batchSize` matches (attempts: a small
 * table of failing messages), skipping rows other transactions hold so a purge never waits on a
 * consumer. The comment names the statement in `pg_stat_activity`.
 */
export function purgeStatements(plan: PurgePlan): { inbox: SQL; attempts: SQL } {
  const inbox = sql.raw(qualifiedName(plan.tables.inbox));
  const attempts = sql.raw(qualifiedName(plan.tables.inboxAttempts));
  const cutoff = cutoffOf(plan.olderThanMs);
  const scope = plan.consumer === undefined ? sql`true` : sql`consumer = ${plan.consumer}`;
  return {
    inbox: sql`/* inboxed:retention */ with doomed as (
        select consumer, message_id from ${inbox}
        where completed_at < ${cutoff} and ${scope}
          and ${WITHOUT_LIVE_LEASE}
        order by completed_at limit ${plan.batchSize}
        for update skip locked
      )
      delete from ${inbox} i using doomed d
      where i.consumer = d.consumer and i.message_id = d.message_id
      returning 1`,
    // Failure records of messages that were later processed, dead-lettered or abandoned.
    attempts: sql`/* inboxed:retention */ delete from ${attempts} where ctid in (
        select ctid from ${attempts} where last_attempt_at < ${cutoff} and ${scope}
        limit ${plan.batchSize} for update skip locked)
      returning 1`,
  };
}

/**
 * @internal Runs one table's batches until one comes back short (or `maxBatches`). `batch` runs
 * one statement and says how many rows it deleted, or `undefined` when it stood down (the
 * scheduler's lock was taken by another instance).
 */
export async function runBatches(
  statement: SQL,
  plan: PurgePlan,
  batch: (statement: SQL) => Promise<number | undefined>,
): Promise<{ deleted: number; batches: number; stoodDown: boolean }> {
  let deleted = 0;
  let batches = 0;
  while (batches < plan.maxBatches) {
    const rows = await batch(statement);
    if (rows === undefined) return { deleted, batches, stoodDown: true };
    batches++;
    deleted += rows;
    if (rows < plan.batchSize) break;
  }
  return { deleted, batches, stoodDown: false };
}

/** @internal One statement on `db`, its deleted rows counted. */
export async function deleteBatch(db: Pick<AnyPgDatabase, 'execute'>, statement: SQL): Promise<number> {
  return rowsIn(await db.execute(statement)).length;
}

/**
 * Deletes completed inbox rows (and stale attempt records) older than `olderThanMs`, in bounded
 * batches: every statement deletes at most `batchSize` rows (the inbox by its `completed_at` index)
 * and skips rows a consumer holds, so it never blocks inserts for longer than one batch. A leased
 * claim whose lease is still live is never deleted; one whose last change is older than
 * `olderThanMs` (released, or abandoned long ago) is. Server time decides age, never the consumer's
 * clock. To run it on a schedule, with one instance cleaning at a time, use `startInboxRetention`.
 */
export async function purgeInbox(db: AnyPgDatabase, options: PurgeOptions): Promise<PurgeResult> {
  const plan = planPurge(options);
  const statements = purgeStatements(plan);
  const run = (statement: SQL) => deleteBatch(db, statement);
  const { schema, name } = getTableConfig(plan.tables.inbox);
  // Database failures become the one error model (DATABASE_UNAVAILABLE, INBOX_TABLE_MISSING, INBOX_QUERY_FAILED).
  return adminOperation('purgeInbox', db, { schema, table: name }, async () => {
    const inbox = await runBatches(statements.inbox, plan, run);
    const attempts = await runBatches(statements.attempts, plan, run);
    return { deleted: inbox.deleted, attemptsDeleted: attempts.deleted };
  });
}
