import { classifyDatabaseError, isConnectionFailure, isTransactionTimeout, isInFailedTransaction } from './database-errors.js';
import { describeError } from './error-text.js';
import { InboxErrorCodes, isInboxError } from './errors.js';
import { FailedWhileStopping } from './handler-deadline.js';
import { CLAIM_LOST_MARKER, ClaimRaceError, InboxStatementError } from './inbox-store.js';

/**
 * @internal Why an inbox transaction did not commit. The rule that decides the kind: the inbox's
 * own statements (claim, lookups, completion check) and its connection are infrastructure; what the
 * handler threw is the handler's, whatever its cause chain says (a handler's `fetch` refused with
 * ECONNREFUSED is not a database outage). Only `counted` kinds add to a message's attempts.
 */
export type TransactionFailure =
  /**
   * The inbox's connection or database is unavailable. Not counted. `underHandler` when the
   * connection broke while the handler ran: a batch is split on it (see `withInboxBatch`).
   */
  | { kind: 'outage'; error: unknown; underHandler?: true }
  /** The claim waited longer than its lock timeout on a concurrent copy. Not counted. */
  | { kind: 'busy'; error: unknown }
  /** The inbox tables are missing (or lack a column). Not counted. */
  | { kind: 'table-missing'; error: unknown }
  /** An inbox statement failed otherwise (permissions, a changed table). Not counted. */
  | { kind: 'inbox-query'; error: unknown }
  /** Serialization failures or deadlocks outlasted the transparent re-runs; `counted` when the handler's own statements kept hitting them. */
  | { kind: 'conflict'; error: unknown; counted: boolean }
  /** The handler failed after the consumer began to stop (see `failedWhileStopping`). Not counted. */
  | { kind: 'stopping'; error: unknown }
  /** The handler threw, or COMMIT refused the handler's writes. Counted. */
  | { kind: 'handler'; error: unknown }
  /** A handler statement failed and the handler carried on: PostgreSQL aborted the transaction. Counted. */
  | { kind: 'aborted'; error: unknown; firstFailure: unknown }
  /** The handler ended the transaction itself or removed its inbox row. Counted. */
  | { kind: 'ended'; error: unknown };

/** @internal True for failures that count as a failed attempt of the message. */
export function isCounted(failure: TransactionFailure): boolean {
  switch (failure.kind) {
    case 'handler':
    case 'aborted':
    case 'ended':
      return true;
    case 'conflict':
      return failure.counted;
    default:
      return false;
  }
}

/** @internal The claim statement (or the BEGIN/connect before it) failed: never the message's fault. */
export function claimFailure(error: unknown): TransactionFailure {
  switch (classifyDatabaseError(error)) {
    case 'transient-conflict':
      return { kind: 'conflict', error, counted: false };
    case 'lock-timeout':
      return { kind: 'busy', error };
    case 'schema-missing':
      return { kind: 'table-missing', error };
    case 'unavailable':
      return { kind: 'outage', error };
    default:
      return { kind: 'inbox-query', error };
  }
}

/**
 * @internal The body (handler, plus the lookups and rejection update around it) threw `error`.
 * `connectionProblem` is what broke the inbox connection meanwhile, if anything: a failed ROLLBACK
 * or the driver's `error` event. A broken connection is an outage, unless PostgreSQL closed it
 * because the handler held the transaction idle too long.
 */
export function bodyFailure(error: unknown, connectionProblem?: unknown): TransactionFailure {
  try {
    return classifyBodyFailure(error, connectionProblem);
  } catch {
    // Only a thrown value can make inspecting it throw (a Proxy, a getter that throws): the handler's.
    return { kind: 'handler', error };
  }
}

function classifyBodyFailure(error: unknown, connectionProblem: unknown): TransactionFailure {
  if (error instanceof ClaimRaceError) return { kind: 'conflict', error, counted: false };
  if (error instanceof InboxStatementError) {
    if (isInFailedTransaction(error.original)) return { kind: 'aborted', error: error.original, firstFailure: undefined };
    if (error.statement === 'result' || error.statement === 'reject') {
      // A session PostgreSQL closed under the handler (idle in transaction too long) shows up here
      // first when the handler returned a result or a rejection: judged as for any other handler.
      return connectionProblem === undefined ? afterHandlerFailure(error.original) : brokenConnectionFailure(error.original, connectionProblem);
    }
    const kind = claimFailure(error.original);
    return kind.kind === 'busy' ? { kind: 'inbox-query', error: error.original } : kind;
  }
  // A timed-out handler is counted whatever happened to its connection (it may have been cut on purpose).
  if (isInboxError(error) && error.code === InboxErrorCodes.HANDLER_TIMEOUT) return { kind: 'handler', error };
  if (error instanceof FailedWhileStopping) return { kind: 'stopping', error };
  if (connectionProblem !== undefined) return brokenConnectionFailure(error, connectionProblem);
  if (classifyDatabaseError(error) === 'transient-conflict') return { kind: 'conflict', error, counted: true };
  return { kind: 'handler', error };
}

/**
 * An inbox statement that runs after the handler, in the transaction the handler had (the stored
 * result, the rejection, the completion check), failed. The claim wrote in this same transaction
 * moments before, so the table existed, was writable and was permitted: unless the connection
 * itself failed, the handler changed the transaction under it (`SET TRANSACTION READ ONLY`,
 * `SET LOCAL ROLE`, `SET LOCAL statement_timeout`, a dropped table) and the failure is counted, or
 * the message would retry for ever without ending.
 */
function afterHandlerFailure(error: unknown): TransactionFailure {
  if (isConnectionFailure(error)) return { kind: 'outage', error };
  if (classifyDatabaseError(error) === 'transient-conflict') return { kind: 'conflict', error, counted: true };
  return { kind: 'handler', error };
}

/**
 * @internal The inbox connection broke while `error` happened: an outage, unless PostgreSQL closed
 * the session because the handler held the transaction too long (`idle_in_transaction_session_timeout`,
 * `transaction_timeout`), which is the handler's doing and is counted. `underHandler` marks a
 * break seen while the body ran (the handler, or the inbox statements just before and after it);
 * node-postgres passes false for one seen at the completion check or COMMIT, which the Drizzle path
 * reports as a completion failure anyway.
 */
export function brokenConnectionFailure(error: unknown, connectionProblem: unknown, underHandler = true): TransactionFailure {
  if (isTransactionTimeout(connectionProblem) || isTransactionTimeout(error)) return { kind: 'handler', error };
  return underHandler ? { kind: 'outage', error: connectionProblem, underHandler } : { kind: 'outage', error: connectionProblem };
}

/**
 * @internal The completion check or COMMIT failed. `firstFailure` is the first handler statement
 * that failed on this connection, when the driver lets us see it.
 */
export function completionFailure(error: unknown, firstFailure?: unknown): TransactionFailure {
  if (isInFailedTransaction(error)) return { kind: 'aborted', error, firstFailure };
  if (isClaimLost(error)) return { kind: 'ended', error };
  // The COMMIT may or may not have landed when the connection failed; the redelivery finds out
  // (duplicate or processed). Anything else is the handler's: a deferred constraint of its writes
  // checked at COMMIT, or a session setting of its own that refused the check.
  return afterHandlerFailure(error);
}

/**
 * @internal True when the completion check found the claimed rows gone (see `InboxStore.verify`):
 * its cast of the marker failed (22P02). Only the driver's own error counts: Drizzle's wrapper
 * quotes the check's SQL, marker included, in its message whatever the check failed with.
 */
export function isClaimLost(error: unknown): boolean {
  for (let link = error, depth = 0; typeof link === 'object' && link !== null && depth < 8; depth++) {
    const { code, message } = link as { code?: unknown; message?: unknown };
    if (code === '22P02' && typeof message === 'string' && message.includes(CLAIM_LOST_MARKER)) return true;
    link = (link as { cause?: unknown }).cause;
  }
  return false;
}

/** @internal One line on what went wrong, for the outcome's error message. */
export function describeFailure(failure: TransactionFailure): string {
  switch (failure.kind) {
    case 'aborted':
      return failure.firstFailure === undefined
        ? 'a statement of the handler failed and the handler carried on; PostgreSQL aborted the transaction, so none of it committed (do not catch database errors inside the handler, or use tx.transaction() for a savepoint)'
        : `a statement of the handler failed and the handler carried on (${describeError(failure.firstFailure)}); PostgreSQL aborted the transaction, so none of it committed (do not catch database errors inside the handler, or use tx.transaction() for a savepoint)`;
    case 'ended':
      return 'the handler ended the inbox transaction itself (COMMIT or ROLLBACK) or removed its inbox row; writes it made after that ran outside the inbox';
    default:
      return describeError(failure.error);
  }
}
