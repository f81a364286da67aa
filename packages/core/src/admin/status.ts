import { sql } from 'drizzle-orm';
import { InboxError, InboxErrorCodes } from '../errors.js';
import type { InboxTableNames } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';
import { adminOperation, adminTables, rowsOf, toDate, toMs, adminKey } from './admin-sql.js';

/** A message with failures on record (its attempts row). */
export interface FailingMessage {
  messageId: string;
  attempts: number;
  lastErrorCode: string | null;
  lastAttemptAt: Date | null;
}

/** One consumer's state, as {@link inboxStatus} reports it. Ages are by the server's clock. */
export interface ConsumerStatus {
  consumer: string;
  /** Inbox rows by status. */
  counts: { processed: number; rejected: number; processing: number };
  /** Age of the oldest open leased claim (since it was last claimed or given back), ms; null without one. */
  oldestProcessingAgeMs: number | null;
  /** Messages with an attempts record. */
  failingCount: number;
  /** The most recently failed of them, up to `failingLimit`. */
  failing: FailingMessage[];
  /** Dead-letters recorded. */
  deadLetters: number;
  /** Age of the oldest completed row, ms: compare it with your retention window to see purge lag. Null when none. */
  oldestCompletedAgeMs: number | null;
}

/** Options of {@link inboxStatus}. */
export interface InboxStatusOptions {
  /** Only this consumer; `UNKNOWN_CONSUMER` when it has no row anywhere. Default: every consumer. */
  consumer?: string;
  /** Failing messages listed per consumer. @defaultValue 10 */
  failingLimit?: number;
}

interface CountRow {
  consumer: string;
  processed: number;
  rejected: number;
  processing: number;
  oldest_processing: number | null;
  oldest_completed: number | null;
  failing: number;
  dead_letters: number;
}

/**
 * Per consumer: inbox rows by status, the oldest open leased claim, failing messages (attempts
 * records), dead-letters, and the age of the oldest completed row (retention lag). Reads every table
 * once per call (a full scan of the inbox for the counts): meant for an operator or a slow dashboard,
 * not a hot path; {@link inspectLeases} is the cheap poll for claims.
 */
export async function inboxStatus(db: AnyPgDatabase, names: InboxTableNames = {}, options: InboxStatusOptions = {}): Promise<ConsumerStatus[]> {
  const tables = adminTables(names);
  const failingLimit = options.failingLimit ?? 10;
  if (!Number.isInteger(failingLimit) || failingLimit < 0) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'failingLimit must be an integer >= 0');
  const consumer = options.consumer === undefined ? undefined : adminKey(options.consumer, 'consumer');
  const scope = consumer === undefined ? sql`true` : sql`consumer = ${consumer}`;
  return adminOperation('status', db, tables.resolved, async () => {
    const counts = await rowsOf<CountRow>(
      db,
      sql`with i as (
          select consumer,
                 count(*) filter (where status = 'processed')::int as processed,
                 count(*) filter (where status = 'rejected')::int as rejected,
                 count(*) filter (where status = 'processing')::int as processing,
                 (extract(epoch from (now() - min(completed_at) filter (where status = 'processing'))) * 1000)::float8 as oldest_processing,
                 (extract(epoch from (now() - min(completed_at) filter (where status <> 'processing'))) * 1000)::float8 as oldest_completed
          from ${tables.inbox} where ${scope} group by consumer),
        a as (select consumer, count(*)::int as failing from ${tables.attempts} where ${scope} group by consumer),
        d as (select consumer, count(*)::int as dead_letters from ${tables.deadLetters} where ${scope} group by consumer),
        c as (select consumer from i union select consumer from a union select consumer from d)
        select c.consumer, coalesce(i.processed, 0) as processed, coalesce(i.rejected, 0) as rejected, coalesce(i.processing, 0) as processing,
               i.oldest_processing, i.oldest_completed, coalesce(a.failing, 0) as failing, coalesce(d.dead_letters, 0) as dead_letters
        from c left join i using (consumer) left join a using (consumer) left join d using (consumer)
        order by c.consumer`,
    );
    if (consumer !== undefined && counts.length === 0) {
      throw new InboxError(InboxErrorCodes.UNKNOWN_CONSUMER, `no consumer named ${JSON.stringify(consumer)} has any inbox, attempts or dead-letter row`, {
        details: { consumer },
      });
    }
    const failing = new Map<string, FailingMessage[]>();
    if (failingLimit > 0 && counts.some((row) => Number(row.failing) > 0)) {
      const rows = await rowsOf<{ consumer: string; message_id: string; attempts: number; last_error_code: string | null; last_attempt_at: unknown }>(
        db,
        sql`select consumer, message_id, attempts, last_error_code, to_jsonb(last_attempt_at) as last_attempt_at from (
            select *, row_number() over (partition by consumer order by last_attempt_at desc, message_id) as n from ${tables.attempts} where ${scope}
          ) ranked where n <= ${failingLimit} order by consumer, n`,
      );
      for (const row of rows) {
        const list = failing.get(row.consumer) ?? [];
        list.push({
          messageId: row.message_id,
          attempts: Number(row.attempts),
          lastErrorCode: row.last_error_code,
          lastAttemptAt: toDate(row.last_attempt_at),
        });
        failing.set(row.consumer, list);
      }
    }
    return counts.map((row) => ({
      consumer: row.consumer,
      counts: { processed: Number(row.processed), rejected: Number(row.rejected), processing: Number(row.processing) },
      oldestProcessingAgeMs: toMs(row.oldest_processing),
      failingCount: Number(row.failing),
      failing: failing.get(row.consumer) ?? [],
      deadLetters: Number(row.dead_letters),
      oldestCompletedAgeMs: toMs(row.oldest_completed),
    }));
  });
}
