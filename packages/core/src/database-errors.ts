/**
 * Classifies errors thrown while talking to PostgreSQL, whichever driver raised them
 * (node-postgres, postgres-js, PGlite) and however Drizzle wrapped them.
 */

/** What kind of database failure an error is, if any. */
export type DatabaseFailure =
  /** Serialization failure or deadlock: the transaction is safe to run again at once. */
  | 'transient-conflict'
  /** `lock_timeout` fired: a concurrent copy holds the inbox row. */
  | 'lock-timeout'
  /** The database is unreachable, restarting, out of resources or timed out. */
  | 'unavailable'
  /** A table or column is missing: the schema is not migrated (SQLSTATE 42P01, 42703, 3F000). */
  | 'schema-missing';

const TRANSIENT_CONFLICT_CODES = new Set(['40001', '40P01']);
const LOCK_TIMEOUT_CODES = new Set(['55P03']);
const SCHEMA_MISSING_CODES = new Set(['42P01', '42703', '3F000']);
// SQLSTATE classes 08 (connection exception), 53 (insufficient resources), 57P0x (operator
// intervention: shutdown, crash, cannot connect now), 57014 (statement_timeout / cancel), 58 (system),
// and 25006 (read-only transaction: connected to a standby, typically during a failover).
// Applied only to inboxed's own statements: the same codes raised inside a handler are the handler's.
const UNAVAILABLE_CODE = /^(08|53|57P0|57014|58|25006)/;
const UNAVAILABLE_NODE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
  // postgres-js
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'QUEUE_TIMEOUT', // 4.x: no pool connection within queue_timeout, like node-postgres' connectionTimeoutMillis
]);
const UNAVAILABLE_MESSAGES = [
  /connection terminated/i, // node-postgres: server went away mid-query
  /timeout exceeded when trying to connect/i, // node-postgres pool connectionTimeoutMillis
  /connection (?:is )?(?:closed|ended)/i,
  /client has encountered a connection error/i,
  /not queryable/i, // node-postgres: a client whose connection already failed
  /cannot use a pool after calling end/i,
  /pglite is closed/i,
  /query read timeout/i,
];

/** Walks `error.cause` chains (Drizzle wraps driver errors in `DrizzleQueryError`). */
function* causeChain(error: unknown): Generator<Record<string, unknown>> {
  let current = error;
  for (let depth = 0; depth < 8 && typeof current === 'object' && current !== null; depth++) {
    yield current as Record<string, unknown>;
    current = (current as { cause?: unknown }).cause;
  }
}

/** Returns the database failure kind of `error`, or `undefined` when it is not one (e.g. a handler bug or a constraint violation). */
export function classifyDatabaseError(error: unknown): DatabaseFailure | undefined {
  for (const link of causeChain(error)) {
    const code = typeof link.code === 'string' ? link.code : undefined;
    if (code !== undefined) {
      if (TRANSIENT_CONFLICT_CODES.has(code)) return 'transient-conflict';
      if (LOCK_TIMEOUT_CODES.has(code)) return 'lock-timeout';
      if (SCHEMA_MISSING_CODES.has(code)) return 'schema-missing';
      if (UNAVAILABLE_CODE.test(code) || UNAVAILABLE_NODE_CODES.has(code)) return 'unavailable';
      // A standby refuses READ WRITE with "cannot set transaction read-write mode during recovery".
      if (code === '0A000' && typeof link.message === 'string' && /during recovery/i.test(link.message)) return 'unavailable';
    }
    // AggregateError from net.connect when every address family fails.
    if (Array.isArray(link.errors) && link.errors.some((e) => classifyDatabaseError(e) === 'unavailable')) return 'unavailable';
    const message = typeof link.message === 'string' ? link.message : '';
    if (UNAVAILABLE_MESSAGES.some((pattern) => pattern.test(message))) return 'unavailable';
  }
  return undefined;
}

/**
 * True when `error` is `unavailable` because the connection or the server failed, or an operator
 * cancelled the statement, and not because the session refused it: a statement timeout (57014)
 * and a read-only transaction (25006) are `unavailable` for a claim, but raised after the handler
 * ran in the same transaction, they come from what the handler set (`SET LOCAL statement_timeout`,
 * `SET TRANSACTION READ ONLY`): the claim had just written on that very connection. (A role's own
 * `statement_timeout` shorter than inboxed's statements is counted too: it is a misconfiguration.)
 */
export function isConnectionFailure(error: unknown): boolean {
  if (classifyDatabaseError(error) !== 'unavailable') return false;
  for (const link of causeChain(error)) {
    if (link.code === '25006') return false;
    // 57014 is a statement timeout or a cancel, told apart only by the message, which PostgreSQL
    // translates (lc_messages). Counted unless it is recognisably an operator's pg_cancel_backend()
    // ("due to user request", English servers): a translated cancel is counted too, which ends in
    // the dead-letter, rather than a translated timeout looping uncounted.
    if (link.code === '57014') return /due to user request/i.test(typeof link.message === 'string' ? link.message : '');
  }
  return true;
}

/** True when PostgreSQL refused a write because the transaction is read-only (SQLSTATE 25006). */
export function isReadOnlyRefusal(error: unknown): boolean {
  for (const link of causeChain(error)) if (link.code === '25006') return true;
  return false;
}

/**
 * True when PostgreSQL ended the session because of how long the handler held the inbox transaction:
 * idle inside it longer than `idle_in_transaction_session_timeout` (SQLSTATE 25P03, waiting on
 * something else with the transaction open), or open longer than `transaction_timeout` (25P04,
 * PostgreSQL 17+, whatever it was doing). That is the handler's doing, not an outage: counted, so a
 * handler that always outlasts the limit ends dead-lettered rather than retried for ever.
 */
export function isTransactionTimeout(error: unknown): boolean {
  for (const link of causeChain(error)) if (link.code === '25P03' || link.code === '25P04') return true;
  return false;
}

/**
 * True when the transaction was already aborted by an earlier failed statement: SQLSTATE 25P02, or
 * postgres-js 4's `TRANSACTION_ROLLED_BACK`, its error for a COMMIT the server answered with
 * ROLLBACK (3.x resolved such a COMMIT; see `rolledBackAfterCheck`).
 */
export function isInFailedTransaction(error: unknown): boolean {
  for (const link of causeChain(error)) if (link.code === '25P02' || link.code === 'TRANSACTION_ROLLED_BACK') return true;
  return false;
}
