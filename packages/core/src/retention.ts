import { sql } from 'drizzle-orm';
import { getTableConfig } from 'drizzle-orm/pg-core';
import { InboxError, InboxErrorCodes } from './errors.js';
import { createInboxTables, type InboxTableNames, type InboxTables } from './schema.js';
import type { AnyPgDatabase } from './types.js';

/** Options of {@link purgeInbox}. */
export interface PurgeOptions {
  /**
   * Delete completed rows older than this many milliseconds. Must exceed the longest window in
   * which a copy of a message can still arrive (broker retention, redelivery, manual replay): a
   * purged id is new again, and its effect would be applied a second time.
   */
  olderThanMs: number;
  /** Only this consumer's rows. Default: every consumer. */
  consumer?: string;
  /** Rows deleted per statement, so a purge never holds long locks. Default 1000. */
  batchSize?: number;
  /** Stop after this many batches (to bound one call). Default: until nothing is left. */
  maxBatches?: number;
  /** The inbox tables. Default `public.inbox`. */
  tables?: InboxTableNames | InboxTables;
}

function qualifiedName(table: InboxTables['inbox'] | InboxTables['inboxAttempts']): string {
  const config = getTableConfig(table);
  return config.schema === undefined ? `"${config.name}"` : `"${config.schema}"."${config.name}"`;
}

/**
 * Deletes completed inbox rows (and stale attempt records) older than `olderThanMs`, in bounded
 * batches using the `completed_at` index. A leased claim whose lease is still live is never deleted;
 * one whose last change is older than `olderThanMs` (released, or abandoned long ago) is. Run it on a schedule; returns how many inbox rows went.
 * Server time decides age, never the consumer's clock.
 */
export async function purgeInbox(db: AnyPgDatabase, options: PurgeOptions): Promise<{ deleted: number }> {
  const { olderThanMs, batchSize = 1000, maxBatches = Number.POSITIVE_INFINITY } = options;
  if (!Number.isFinite(olderThanMs) || olderThanMs <= 0)
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'olderThanMs must be a positive number of milliseconds');
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'batchSize must be an integer >= 1');
  const tables = options.tables !== undefined && 'inbox' in options.tables ? options.tables : createInboxTables(options.tables);
  const inbox = sql.raw(qualifiedName(tables.inbox));
  const attempts = sql.raw(qualifiedName(tables.inboxAttempts));
  const cutoff = sql`now() - (${String(olderThanMs)} || ' milliseconds')::interval`;
  const scope = options.consumer === undefined ? sql`true` : sql`consumer = ${options.consumer}`;
  let deleted = 0;
  for (let batch = 0; batch < maxBatches; batch++) {
    const result = (await db.execute(sql`
      with doomed as (
        select consumer, message_id from ${inbox}
        where completed_at < ${cutoff} and ${scope}
          and not (status = 'processing' and lease_expires_at > now())
        order by completed_at limit ${batchSize}
        for update skip locked
      )
      delete from ${inbox} i using doomed d
      where i.consumer = d.consumer and i.message_id = d.message_id
      returning 1`)) as unknown;
    const rows = Array.isArray(result) ? result : (result as { rows: unknown[] }).rows;
    deleted += rows.length;
    if (rows.length < batchSize) break;
  }
  // Failure records of messages that were later processed, dead-lettered or abandoned.
  await db.execute(sql`delete from ${attempts} where last_attempt_at < ${cutoff} and ${scope}`);
  return { deleted };
}
