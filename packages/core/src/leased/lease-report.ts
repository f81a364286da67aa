import { refuseUnsupportedClient } from '../drivers/postgres-js.js';
import { sql } from 'drizzle-orm';
import { qualifiedName } from '../qualified-name.js';
import { rowsOf } from '../query-rows.js';
import { createInboxTables, type InboxTableNames, type InboxTables } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';

/** Open leased-mode claims, as {@link inspectLeases} finds them (server time). */
export interface LeaseReport {
  /** Claims whose lease is live: a worker is at work on them. */
  live: number;
  /** Claims whose lease ran out without completing: a crashed or hung worker; the next delivery takes them over. */
  expired: number;
  /** Claims given back after a failed attempt, waiting for their next delivery (or dead-lettered). */
  released: number;
  /**
   * How long the oldest open claim has stood unchanged (since it was last claimed or released), in
   * ms of the server's clock; null when there is none.
   */
  oldestAgeMs: number | null;
}

/**
 * Counts the open leased-mode claims (`processing` rows) of one consumer, or of all, through the
 * small partial index on them: cheap to poll for a dashboard or an alert ("expired claims keep
 * growing": workers crash mid-call; "oldest age keeps growing": a message never completes).
 */
export async function inspectLeases(db: AnyPgDatabase, options: { consumer?: string; tables?: InboxTableNames | InboxTables } = {}): Promise<LeaseReport> {
  refuseUnsupportedClient(db, 'inspectLeases');
  const tables = options.tables !== undefined && 'inbox' in options.tables ? options.tables : createInboxTables(options.tables);
  const inbox = sql.raw(qualifiedName(tables.inbox));
  const scope = options.consumer === undefined ? sql`` : sql` and consumer = ${options.consumer}`;
  const [row] = await rowsOf<{ live: number; expired: number; released: number; oldest: number | null }>(
    db,
    sql`
    select count(*) filter (where lease_expires_at > now())::int as live,
           count(*) filter (where lease_expires_at <= now())::int as expired,
           count(*) filter (where lease_expires_at is null)::int as released,
           (extract(epoch from (now() - min(completed_at))) * 1000)::float8 as oldest
    from ${inbox} where status = 'processing'${scope}`,
  );
  return {
    live: Number(row?.live ?? 0),
    expired: Number(row?.expired ?? 0),
    released: Number(row?.released ?? 0),
    oldestAgeMs: row?.oldest === null || row?.oldest === undefined ? null : Math.round(Number(row.oldest)),
  };
}
