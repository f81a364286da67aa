import { backoffDelay } from './backoff.js';
import { classifyDatabaseError } from './database-errors.js';
import { describeError, InboxError, InboxErrorCodes, isInboxError, isPermanentError } from './errors.js';
import type { InboxStore } from './inbox-store.js';
import type { ResolvedOptions } from './options.js';
import { OutcomeReasons, type AnyPgDatabase, type InboxMessage, type InboxOutcome } from './types.js';

/** @internal an error thrown by the inbox's own claim statement rather than by the handler. */
export class ClaimFailure extends Error {
  constructor(readonly original: unknown) {
    super('inbox claim failed', { cause: original });
  }
}

/** @internal `retry` for failures that are not the message's fault: never counted, never dead-lettered. */
export function infrastructureRetry(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  message: InboxMessage,
  code: string,
  reason: string,
  text: string,
  cause: unknown,
): InboxOutcome {
  const attempt = message.attempt ?? 1;
  return {
    status: 'retry',
    messageId: message.id,
    consumer: options.consumer,
    reason,
    error: new InboxError(code, `${text}: ${describeError(cause)}`, { cause, messageIds: [message.id], details: { consumer: options.consumer } }),
    attempt,
    retryAfterMs: backoffDelay(attempt, options.backoff),
  };
}

/**
 * @internal Turns a failed transaction into an outcome. Database outages and lock timeouts on the
 * claim are `retry` without counting an attempt (the message did nothing wrong). Handler errors are
 * counted durably, then become `retry` with backoff, or `dead-letter` when permanent or exhausted.
 */
export async function outcomeOfFailure(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  message: InboxMessage,
  thrown: unknown,
): Promise<InboxOutcome> {
  const claimFailed = thrown instanceof ClaimFailure;
  const error = claimFailed ? thrown.original : thrown;
  const kind = classifyDatabaseError(error);
  if (kind === 'unavailable') {
    return infrastructureRetry(options, message, InboxErrorCodes.DATABASE_UNAVAILABLE, OutcomeReasons.DATABASE_UNAVAILABLE, 'database unavailable', error);
  }
  if (kind === 'lock-timeout' && claimFailed) {
    return infrastructureRetry(options, message, InboxErrorCodes.LOCK_TIMEOUT, OutcomeReasons.IN_PROGRESS, 'another copy of this message is still being processed', error);
  }
  if (kind === 'schema-missing' && claimFailed) {
    return infrastructureRetry(options, message, InboxErrorCodes.INBOX_TABLE_MISSING, OutcomeReasons.INBOX_TABLE_MISSING, 'the inbox tables are missing; run migrate(db, { schema, table }) or your drizzle-kit migration', error);
  }
  if (kind === 'transient-conflict') {
    return infrastructureRetry(options, message, InboxErrorCodes.TRANSACTION_CONFLICT, OutcomeReasons.TRANSACTION_CONFLICT, 'serialization failures or deadlocks outlasted the transparent retries', error);
  }

  const permanent = isPermanentError(error) || options.isPermanent(error);
  const code = isInboxError(error) ? error.code : permanent ? InboxErrorCodes.PERMANENT_FAILURE : InboxErrorCodes.HANDLER_FAILED;
  const handlerError = isInboxError(error)
    ? error
    : new InboxError(code, `handler failed: ${describeError(error)}`, { cause: error, messageIds: [message.id], details: { consumer: options.consumer } });

  let attempt = message.attempt ?? 1;
  let firstAttemptAt: Date | undefined;
  let lastAttemptAt: Date | undefined;
  try {
    const record = await store.recordFailure(options.db, message.id, { message: describeError(error), code });
    attempt = Math.max(attempt, record.attempts);
    firstAttemptAt = record.firstAttemptAt;
    lastAttemptAt = record.lastAttemptAt;
  } catch (recordError) {
    // Counting failed (the database may have gone away after the handler's failure). Fall back to
    // the broker's count; a permanent error is still dead-lettered since that needs no database.
    if (!permanent) {
      const [code, reason] = classifyDatabaseError(recordError) === 'schema-missing'
        ? [InboxErrorCodes.INBOX_TABLE_MISSING, OutcomeReasons.INBOX_TABLE_MISSING]
        : [InboxErrorCodes.DATABASE_UNAVAILABLE, OutcomeReasons.DATABASE_UNAVAILABLE];
      return infrastructureRetry(options, message, code, reason, `handler failed (${describeError(error)}) and the attempt could not be recorded`, recordError);
    }
  }

  const base = { messageId: message.id, consumer: options.consumer, attempt, firstAttemptAt, lastAttemptAt };
  if (permanent) {
    return { ...base, status: 'dead-letter', reason: OutcomeReasons.PERMANENT_FAILURE, error: handlerError };
  }
  if (attempt >= options.maxAttempts) {
    const exhausted = new InboxError(
      InboxErrorCodes.MAX_ATTEMPTS_EXCEEDED,
      `failed ${attempt} times (maxAttempts ${options.maxAttempts}); last error: ${describeError(error)}`,
      { cause: error, messageIds: [message.id], details: { consumer: options.consumer, attempt } },
    );
    return { ...base, status: 'dead-letter', reason: OutcomeReasons.MAX_ATTEMPTS_EXCEEDED, error: exhausted };
  }
  return { ...base, status: 'retry', reason: OutcomeReasons.HANDLER_FAILED, error: handlerError, retryAfterMs: backoffDelay(attempt, options.backoff) };
}
