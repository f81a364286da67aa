import { sql } from 'drizzle-orm';
import { InboxError, InboxErrorCodes } from '../errors.js';
import { rowsOf } from '../query-rows.js';
import type { AnyPgDatabase } from '../types.js';

/** The oldest PostgreSQL major inboxed supports; CI proves 14 to 18. */
export const MIN_POSTGRES_MAJOR = 14;

/**
 * @internal Throws `UNSUPPORTED_DATABASE` unless the server is PostgreSQL 14 or later. Older
 * servers lack behaviour the inbox relies on and are not tested; failing here, at `migrate()` and
 * at a consumer's start, beats failing on the first message in some other way.
 */
export async function assertSupportedServer(db: Pick<AnyPgDatabase, 'execute'>): Promise<void> {
  const [row] = await rowsOf<{ num: string; version: string }>(
    db,
    sql`select current_setting('server_version_num') as num, current_setting('server_version') as version`,
  );
  const num = Number(row?.num);
  if (Number.isFinite(num) && num < MIN_POSTGRES_MAJOR * 10_000) {
    throw new InboxError(
      InboxErrorCodes.UNSUPPORTED_DATABASE,
      `PostgreSQL ${row!.version} is not supported: inboxed needs PostgreSQL ${MIN_POSTGRES_MAJOR} or later (tested: 14 to 18)`,
      { details: { serverVersion: row!.version } },
    );
  }
}
