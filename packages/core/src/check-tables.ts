import { classifyDatabaseError } from './database-errors.js';
import { describeError } from './error-text.js';
import { InboxError, InboxErrorCodes, isInboxError } from './errors.js';
import { inspectInboxTables } from './migrations/inspect.js';
import { assertSupportedServer } from './migrations/server-version.js';
import type { InboxTables } from './schema.js';
import type { AnyPgDatabase } from './types.js';

/**
 * @internal Behind `processor.checkTables()`: resolves when the inbox tables are usable; rejects with
 * `INBOX_TABLE_MISSING` (tables, columns or their unique key missing), `UNSUPPORTED_DATABASE`
 * (PostgreSQL before 14), `DATABASE_UNAVAILABLE` (the
 * database cannot be reached) or `INBOX_QUERY_FAILED` (the check itself was refused).
 */
export async function checkInboxTables(db: AnyPgDatabase, tables: InboxTables, consumer: string): Promise<void> {
  let problems: string[];
  try {
    await assertSupportedServer(db);
    problems = await inspectInboxTables(db, tables);
  } catch (error) {
    if (isInboxError(error)) throw error;
    const code = classifyDatabaseError(error) === 'unavailable' ? InboxErrorCodes.DATABASE_UNAVAILABLE : InboxErrorCodes.INBOX_QUERY_FAILED;
    throw new InboxError(code, `could not check the inbox tables: ${describeError(error)}`, { cause: error, details: { consumer } });
  }
  if (problems.length > 0) {
    throw new InboxError(
      InboxErrorCodes.INBOX_TABLE_MISSING,
      `the inbox tables are not usable (${problems.join('; ')}); run migrate(db, { schema, table }) or your drizzle-kit migration`,
      { details: { consumer, problems } },
    );
  }
}
