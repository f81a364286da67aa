import { type SQL, sql } from 'drizzle-orm';
import { classifyDatabaseError } from '../database-errors.js';
import { refuseUnsupportedClient } from '../drivers/postgres-js.js';
import { describeError } from '../error-text.js';
import { InboxError, InboxErrorCodes, isInboxError } from '../errors.js';
import { isWellFormed } from '../unicode.js';
import { type InboxTableNames, type ResolvedTableNames, resolveTableNames } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';

/** @internal What the admin statements need of a database or a transaction. */
export type Executable = Pick<AnyPgDatabase, 'execute'>;

/** @internal The four inbox tables as quoted, schema-qualified SQL names. */
export interface AdminTables {
  resolved: ResolvedTableNames;
  inbox: SQL;
  attempts: SQL;
  deadLetters: SQL;
  audit: SQL;
}

/** @internal Validates the names (INVALID_IDENTIFIER) and quotes every table once. */
export function adminTables(names: InboxTableNames = {}): AdminTables {
  const resolved = resolveTableNames(names);
  const quote = (table: string) => sql.raw(resolved.schema === undefined ? `"${table}"` : `"${resolved.schema}"."${table}"`);
  return {
    resolved,
    inbox: quote(resolved.table),
    attempts: quote(resolved.attemptsTable),
    deadLetters: quote(resolved.deadLettersTable),
    audit: quote(resolved.auditTable),
  };
}

export { rowsOf } from '../query-rows.js';

/**
 * @internal A consumer name or message id given to an admin function, checked as the consumers
 * check what they store: text without NUL and without lone surrogates, or `INVALID_OPTIONS`. A
 * driver sends a lone surrogate as U+FFFD, so without the check the function would find, release
 * or requeue another message, the one whose stored id has U+FFFD there.
 */
export function adminKey(value: unknown, what: 'consumer' | 'messageId'): string {
  if (typeof value !== 'string') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `${what} must be a string`);
  if (value.includes('\0')) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `${what} contains a NUL character, which no stored ${what} can hold`);
  if (!isWellFormed(value))
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `${what} contains a lone surrogate (not valid Unicode), which no stored ${what} can hold`);
  return value;
}

/**
 * @internal Runs an admin operation, turning database failures into the one error model: a missing
 * table or column `INBOX_TABLE_MISSING` (run `migrate`), an outage `DATABASE_UNAVAILABLE`, anything
 * else `INBOX_QUERY_FAILED`. InboxErrors (refusals) pass through unchanged. A postgres-js client
 * whose settings rewrite what the admin statements read is refused first (`INVALID_OPTIONS`): read
 * through it, a row's fields come back renamed, and a status, a purge count or a repair's decision
 * would rest on fields that look missing.
 */
export async function adminOperation<T>(
  operation: string,
  db: unknown,
  names: Pick<ResolvedTableNames, 'schema' | 'table'>,
  run: () => Promise<T>,
): Promise<T> {
  refuseUnsupportedClient(db, operation);
  try {
    return await run();
  } catch (error) {
    if (isInboxError(error)) throw error;
    const details = { operation, schema: names.schema, table: names.table };
    const kind = classifyDatabaseError(error);
    if (kind === 'schema-missing') {
      throw new InboxError(
        InboxErrorCodes.INBOX_TABLE_MISSING,
        `${operation}: the inbox tables are missing or incomplete (${describeError(error)}); apply the missing migrations with the tool that owns the tables: \`inboxed migrate\` or migrate(db, { schema, table }), or drizzle-kit generate + migrate when drizzle-kit owns them`,
        { cause: error, details },
      );
    }
    const code = kind === 'unavailable' ? InboxErrorCodes.DATABASE_UNAVAILABLE : InboxErrorCodes.INBOX_QUERY_FAILED;
    throw new InboxError(code, `${operation} failed: ${describeError(error)}`, { cause: error, details });
  }
}

/** @internal A timestamp from `to_jsonb` (ISO text) as a Date; null stays null. */
export function toDate(value: unknown): Date | null {
  if (value === null || value === undefined) return null;
  return value instanceof Date ? value : new Date(String(value));
}

/** @internal Milliseconds from an `extract(epoch ...) * 1000` column, rounded; null stays null. */
export function toMs(value: unknown): number | null {
  return value === null || value === undefined ? null : Math.round(Number(value));
}
