/**
 * Error descriptions that are safe to store and to export: in `inbox_attempts.last_error`, in
 * `outcome.error.message` and in every adapter's dead-letter headers, which other teams read.
 *
 * Two rules. No message content: Drizzle wraps driver errors as `Failed query: <sql> params: <values>`,
 * and those values are the payload, so a wrapper is described by the driver error it carries (its
 * message, SQLSTATE, constraint, table and column) and the SQL and parameters are dropped; the full
 * error object stays on the outcome, in memory only. Nothing PostgreSQL refuses to store: a NUL
 * character or a lone surrogate in a thrown message must not turn recording the failure into a
 * failure of its own.
 */

import { isWellFormed, toWellFormed } from './unicode.js';

/** The longest description kept; longer ones are cut (never inside a surrogate pair). */
export const MAX_ERROR_TEXT = 2000;

/** A SQLSTATE: five digits or upper-case letters. */
const SQLSTATE = /^[0-9A-Z]{5}$/;

interface QueryWrapper {
  query: string;
  params: unknown[];
  cause: unknown;
}

/**
 * Drizzle's `DrizzleQueryError` (and look-alikes): its message embeds the query parameters. A driver
 * error that merely carries `query`/`params` fields (PGlite's) has a SQLSTATE of its own and a
 * message without them, so it is described as itself.
 */
function isQueryWrapper(error: unknown): error is QueryWrapper {
  const candidate = error as Partial<QueryWrapper> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.query === 'string' &&
    Array.isArray(candidate.params) &&
    sqlStateOf(candidate) === undefined
  );
}

/** The SQLSTATE of a driver error (node-postgres, postgres-js and PGlite all use `code`). */
export function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && SQLSTATE.test(code) ? code : undefined;
}

/** Names of the objects a database error concerns, under node-postgres/PGlite or postgres-js spelling. */
function databaseContext(error: Record<string, unknown>): string {
  const parts: string[] = [];
  const add = (label: string, ...keys: string[]) => {
    for (const key of keys) {
      const value = error[key];
      if (typeof value === 'string' && value !== '') return void parts.push(`${label} "${value}"`);
    }
  };
  add('constraint', 'constraint', 'constraint_name');
  add('table', 'table', 'table_name');
  add('column', 'column', 'column_name');
  return parts.length === 0 ? '' : `, ${parts.join(', ')}`;
}

function nameOf(error: Error): string {
  // node-postgres names its DatabaseError "error"; the class name says more.
  if (error.name !== 'error') return error.name;
  return typeof error.constructor?.name === 'string' && error.constructor.name !== '' ? error.constructor.name : 'Error';
}

function describeUnsafe(error: unknown, depth: number): string {
  if (isQueryWrapper(error) && depth < 4) {
    return error.cause === undefined ? 'database query failed' : describeUnsafe(error.cause, depth + 1);
  }
  if (error instanceof Error) {
    const text = `${nameOf(error)}: ${error.message}`;
    const state = sqlStateOf(error);
    return state === undefined ? text : `${text} (SQLSTATE ${state}${databaseContext(error as unknown as Record<string, unknown>)})`;
  }
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

/**
 * Makes text storable in a PostgreSQL `text` column and in broker headers: NUL becomes U+FFFD, lone
 * surrogates become U+FFFD, and the result is at most `max` UTF-16 units without splitting a pair.
 */
export function storableText(text: string, max: number = MAX_ERROR_TEXT): string {
  let safe = text.includes('\u0000') ? text.replaceAll('\u0000', '\uFFFD') : text;
  if (safe.length > max) safe = safe.slice(0, max);
  return isWellFormed(safe) ? safe : toWellFormed(safe);
}

/**
 * A readable one-line description of any thrown value, for logs, stored attempts and dead-letter
 * headers. It never contains query parameters (see the module comment), never contains NUL or a lone
 * surrogate, and is at most {@link MAX_ERROR_TEXT} characters. Never throws.
 */
export function describeError(error: unknown): string {
  try {
    return storableText(describeUnsafe(error, 0));
  } catch {
    // A hostile value (a getter or toString that throws) still gets a description.
    return 'unprintable error value';
  }
}
