/**
 * The one error model of inboxed. Every error the SDK raises or attaches to an outcome is an
 * {@link InboxError} with a stable {@link InboxErrorCode}; adapters add their own codes through
 * the same class so callers can switch on `code` without caring which package raised it.
 */

/** Stable error codes raised by `@inboxed/core`. Adapters extend this set with their own strings. */
export const InboxErrorCodes = {
  /** The message id is missing, empty, not a string, not well-formed UTF-16, contains NUL, or is longer than 512 bytes. */
  INVALID_MESSAGE_ID: 'INVALID_MESSAGE_ID',
  /** A field of the delivery other than the id is malformed (`source`, `receivedAt`, `attempt`). */
  INVALID_MESSAGE: 'INVALID_MESSAGE',
  /** A known message id arrived with a different payload fingerprint. */
  PAYLOAD_MISMATCH: 'PAYLOAD_MISMATCH',
  /** The payload could not be fingerprinted (not JSON-serialisable, cyclic, BigInt, ...). */
  FINGERPRINT_FAILED: 'FINGERPRINT_FAILED',
  /** The `parse` option rejected the payload before any database work. */
  VALIDATION_FAILED: 'VALIDATION_FAILED',
  /** The handler threw a retryable error; the transaction was rolled back. */
  HANDLER_FAILED: 'HANDLER_FAILED',
  /** The handler ran longer than `handlerTimeoutMs`; its transaction was rolled back. Counted. */
  HANDLER_TIMEOUT: 'HANDLER_TIMEOUT',
  /**
   * The handler failed after the consumer began to stop (its `signal` fired): typically it honoured
   * the signal. Its transaction was rolled back; retried, not counted (a deploy is not the message's fault).
   * Also a batch's message, or a redelivery waiting for its turn, not started because the stop came first.
   */
  CONSUMER_STOPPING: 'CONSUMER_STOPPING',
  /**
   * A statement in the handler failed and the handler carried on (caught the error) and returned:
   * PostgreSQL had already aborted the transaction, so nothing of it, not even the inbox row, commits.
   * Counted as a failed attempt.
   */
  TRANSACTION_ABORTED: 'TRANSACTION_ABORTED',
  /**
   * The handler tried to end the inbox transaction itself (a raw `COMMIT` or `ROLLBACK`: refused
   * before it is sent, and the attempt fails even if the handler caught the refusal), used its `tx`
   * after it returned (refused), or removed the inbox row it was running under. Counted as a failed
   * attempt.
   */
  TRANSACTION_ENDED: 'TRANSACTION_ENDED',
  /**
   * The handler sent a query through its `tx` that could hold the connection past the handler: a
   * cursor or a stream (a node-postgres `Submittable` such as pg-cursor or pg-query-stream, a
   * postgres-js `.cursor()`, `.readable()` or `.writable()`). Left open, inboxed's completion check
   * and `COMMIT` would wait behind it for ever. Refused before it is sent; thrown to the handler, it
   * is the handler's failure like any other throw.
   */
  UNSUPPORTED_QUERY: 'UNSUPPORTED_QUERY',
  /**
   * The handler started a `tx.transaction()` (a savepoint) while another of the same transaction was
   * still open: they would have rolled back each other's writes. Counted as a failed attempt.
   */
  OVERLAPPING_SAVEPOINTS: 'OVERLAPPING_SAVEPOINTS',
  /** The handler threw a {@link PermanentError} (or an error classified as permanent). */
  PERMANENT_FAILURE: 'PERMANENT_FAILURE',
  /** The message failed `maxAttempts` times. */
  MAX_ATTEMPTS_EXCEEDED: 'MAX_ATTEMPTS_EXCEEDED',
  /** Stored as an attempt's last error code while a redelivered message's attempt runs: one that stays there never finished (the process died). */
  ATTEMPT_UNFINISHED: 'ATTEMPT_UNFINISHED',
  /** The database could not be reached, dropped the connection, or timed out. */
  DATABASE_UNAVAILABLE: 'DATABASE_UNAVAILABLE',
  /** A concurrent copy of the same message held the inbox row longer than `lockTimeoutMs`. */
  LOCK_TIMEOUT: 'LOCK_TIMEOUT',
  /** Serialization failures or deadlocks persisted through every transparent retry. */
  TRANSACTION_CONFLICT: 'TRANSACTION_CONFLICT',
  /** The inbox tables do not exist (or lack a column): run `migrate()` or your drizzle-kit migration. */
  INBOX_TABLE_MISSING: 'INBOX_TABLE_MISSING',
  /**
   * One of inboxed's own statements failed for a reason that is neither an outage nor a missing table
   * (permission denied, a changed inbox table, ...). Never the message's fault: retried, not counted.
   */
  INBOX_QUERY_FAILED: 'INBOX_QUERY_FAILED',
  /** inboxed itself failed unexpectedly (a bug: please report it). The message is retried, not counted. */
  INTERNAL_ERROR: 'INTERNAL_ERROR',
  /** A processor threw instead of resolving to an outcome (a middleware's bug). The delivery is retried, not counted. */
  PROCESSOR_THREW: 'PROCESSOR_THREW',
  /**
   * A broker consumer could not record a dead-letter decision in the inbox's dead-letters table, so it
   * did not dead-letter the delivery: it comes back (not counted) and is dead-lettered once recording works.
   */
  DEAD_LETTER_NOT_RECORDED: 'DEAD_LETTER_NOT_RECORDED',
  /** A retention run (`startInboxRetention`) failed for another reason than an outage, e.g. a statement hit its `statementTimeoutMs`. The schedule goes on. */
  RETENTION_FAILED: 'RETENTION_FAILED',
  /** A consumer's `stop()` gave up waiting for deliveries in flight after `stopTimeoutMs`; they are redelivered. */
  STOP_TIMEOUT: 'STOP_TIMEOUT',
  /** An option passed to inboxed is invalid. Thrown synchronously at construction time. */
  INVALID_OPTIONS: 'INVALID_OPTIONS',
  /** A table or schema name is not a plain SQL identifier. */
  INVALID_IDENTIFIER: 'INVALID_IDENTIFIER',
  /**
   * The database server is a version inboxed does not support (PostgreSQL before 14). Raised by
   * `migrate()` and `checkTables()` (so by every broker consumer's `start()`).
   */
  UNSUPPORTED_DATABASE: 'UNSUPPORTED_DATABASE',
  /** `migrate()` failed; the cause holds the database error. */
  MIGRATION_FAILED: 'MIGRATION_FAILED',
  /**
   * Leased mode: another worker holds a live lease on the message (the `busy` outcome). Not counted;
   * the delivery comes back after the lease's remaining time.
   */
  LEASE_HELD: 'LEASE_HELD',
  /**
   * Leased mode: this worker's claim was taken over (its lease expired and another worker claimed the
   * message with a higher fencing token) or released before it completed. Its completion was refused
   * by the fence, so nothing of it was written; the delivery is retried, not counted.
   */
  LEASE_LOST: 'LEASE_LOST',
  /** A transactional processor found a leased-mode claim on the message, which it cannot take over. */
  MODE_MISMATCH: 'MODE_MISMATCH',
  /** `storeResult(value)` got a value with no JSON form, or one larger than 64 KiB as JSON. */
  INVALID_RESULT: 'INVALID_RESULT',
  /**
   * A broker consumer's retention guard, with `strictRetention`: the inbox keeps message ids
   * (`inboxRetentionMs`) for less time than the broker may redeliver a message (its redelivery
   * horizon), or that horizon is unbounded or unknown. `start()` rejects; without `strictRetention`
   * the consumer only warns.
   */
  RETENTION_TOO_SHORT: 'RETENTION_TOO_SHORT',
  /** Admin (`@inboxed/core/admin`, the `inboxed` CLI): the consumer has no row in any inbox table. */
  UNKNOWN_CONSUMER: 'UNKNOWN_CONSUMER',
  /** Admin: nothing is recorded for this message id (no inbox row, attempts, dead-letter or audit row). */
  MESSAGE_NOT_FOUND: 'MESSAGE_NOT_FOUND',
  /** Admin: a repair was refused because the message is completed (`processed` or `rejected`); repairs never touch completed rows. */
  ALREADY_COMPLETED: 'ALREADY_COMPLETED',
  /** Admin: `releaseMessage` found neither a live leased claim nor an attempts record for the message. Nothing was changed. */
  NOTHING_TO_RELEASE: 'NOTHING_TO_RELEASE',
  /** Admin: `requeueMessage` found no attempts record: the message's retry budget is already fresh. Nothing was changed. */
  NOTHING_TO_REQUEUE: 'NOTHING_TO_REQUEUE',
} as const;

/** A code from {@link InboxErrorCodes}, or an adapter's own code. */
export type InboxErrorCode = (typeof InboxErrorCodes)[keyof typeof InboxErrorCodes] | (string & {});

/** Extra context attached to an error: never required to handle it, always useful to log it. */
export type InboxErrorDetails = Record<string, unknown>;

const INBOX_ERROR_BRAND = Symbol.for('inboxed.InboxError');
const PERMANENT_ERROR_BRAND = Symbol.for('inboxed.PermanentError');

export interface InboxErrorOptions {
  /** The underlying error, kept as `error.cause`. */
  cause?: unknown;
  /** Message ids the error concerns. */
  messageIds?: readonly string[];
  /** Structured context (consumer, table, attempt, ...). */
  details?: InboxErrorDetails;
}

/** An error raised by inboxed. Switch on {@link InboxError.code}; never on the message text. */
export class InboxError extends Error {
  /** @internal brand so that two installed copies of the package still recognise each other. */
  readonly [INBOX_ERROR_BRAND] = true;
  /** Stable, machine-readable code. */
  readonly code: InboxErrorCode;
  /** Message ids this error concerns (empty when it concerns none). */
  readonly messageIds: readonly string[];
  /** Structured context for logs. */
  readonly details: InboxErrorDetails;

  constructor(code: InboxErrorCode, message: string, options: InboxErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'InboxError';
    this.code = code;
    this.messageIds = options.messageIds ?? [];
    this.details = options.details ?? {};
  }
}

/**
 * Throw this (or a subclass) from a handler when retrying cannot help: the message is
 * dead-lettered at once with reason `permanent-failure` instead of being retried.
 */
export class PermanentError extends Error {
  /** @internal */
  readonly [PERMANENT_ERROR_BRAND] = true;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

/** True for an {@link InboxError}, including one created by another installed copy of inboxed. */
export function isInboxError(error: unknown): error is InboxError {
  return hasBrand(error, INBOX_ERROR_BRAND);
}

/** True for a {@link PermanentError}, including one created by another installed copy of inboxed. */
export function isPermanentError(error: unknown): error is PermanentError {
  return hasBrand(error, PERMANENT_ERROR_BRAND);
}

/** Whether `value` carries `brand`; false when reading it throws (a Proxy a handler threw, say), never a throw. */
function hasBrand(value: unknown, brand: symbol): boolean {
  try {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[brand] === true;
  } catch {
    return false;
  }
}

export { describeError } from './error-text.js';
