import { sql } from 'drizzle-orm';
import { InboxError, InboxErrorCodes } from '../errors.js';
import type { InboxTableNames } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';
import { adminOperation, adminTables, rowsOf, adminKey } from './admin-sql.js';
import { type DeadLetterRecord, deadLetterRecord, type JsonRow } from './records.js';

/** Options of {@link listDeadLetters}. */
export interface ListDeadLettersOptions {
  /** Only this consumer's dead-letters. Default: every consumer. */
  consumer?: string;
  /** Only those recorded at or after this time. */
  since?: Date;
  /** At most this many, newest first. @defaultValue 100 */
  limit?: number;
}

/** The recorded dead-letters (all brokers), newest first. */
export async function listDeadLetters(db: AnyPgDatabase, names: InboxTableNames = {}, options: ListDeadLettersOptions = {}): Promise<DeadLetterRecord[]> {
  const tables = adminTables(names);
  const limit = options.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'limit must be an integer >= 1');
  const year = options.since?.getUTCFullYear();
  // PostgreSQL reads an ISO date of years 1 to 9999; other years print as +275760-... or -000001-...
  if (options.since !== undefined && !(year !== undefined && year >= 1 && year <= 9999))
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'since must be a valid Date in the years 1 to 9999');
  const consumer = options.consumer === undefined ? sql`` : sql` and consumer = ${adminKey(options.consumer, 'consumer')}`;
  const since = options.since === undefined ? sql`` : sql` and dead_lettered_at >= ${options.since.toISOString()}::timestamptz`;
  return adminOperation('dead-letters', db, tables.resolved, async () => {
    const rows = await rowsOf<{ row: JsonRow }>(
      db,
      sql`select to_jsonb(d) as row from ${tables.deadLetters} d where true${consumer}${since} order by dead_lettered_at desc, id desc limit ${limit}`,
    );
    return rows.map((r) => deadLetterRecord(r.row));
  });
}
