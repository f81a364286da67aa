import { backoffDelay } from './backoff.js';
import { classifyDatabaseError } from './database-errors.js';
import { describeError } from './error-text.js';
import { InboxError, InboxErrorCodes, isInboxError, isPermanentError, type InboxErrorCode } from './errors.js';
import type { AttemptRecord, InboxStore } from './inbox-store.js';
import { displayMessageId } from './message-id.js';
import type { ResolvedOptions } from './options.js';
import { describeFailure, isCounted, type TransactionFailure } from './transaction-failures.js';
import { OutcomeReasons, type AnyPgDatabase, type InboxMessage, type InboxOutcome } from './types.js';

/** @internal `retry` for failures that are not the message's fault: never counted, never dead-lettered. */
export function infrastructureRetry(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  message: InboxMessage,
  code: InboxErrorCode,
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
 * @internal The code and reason of an inbox statement that failed for no fault of the message, by
 * what the database answered: away (`DATABASE_UNAVAILABLE`), inbox tables missing or changed
 * (`INBOX_TABLE_MISSING`), or anything else (`INBOX_QUERY_FAILED`).
 */
export function inboxStatementFailure(error: unknown): [InboxErrorCode, string] {
  switch (classifyDatabaseError(error)) {
    case 'unavailable':
      return [InboxErrorCodes.DATABASE_UNAVAILABLE, OutcomeReasons.DATABASE_UNAVAILABLE];
    case 'schema-missing':
      return [InboxErrorCodes.INBOX_TABLE_MISSING, OutcomeReasons.INBOX_TABLE_MISSING];
    default:
      return [InboxErrorCodes.INBOX_QUERY_FAILED, OutcomeReasons.INBOX_QUERY_FAILED];
  }
}

/** Whether a handler error is permanent. A throwing `isPermanent` counts as "no", and is reported. */
function permanence(options: ResolvedOptions<AnyPgDatabase, unknown>, error: unknown): { permanent: boolean; problem?: unknown } {
  if (isPermanentError(error)) return { permanent: true };
  try {
    return { permanent: options.isPermanent(error) === true };
  } catch (problem) {
    return { permanent: false, problem };
  }
}

/** The code and text of a counted failure. */
function describeCounted(failure: TransactionFailure, permanent: boolean, transactionRetries: number): { code: InboxErrorCode; text: string; stored: string } {
  switch (failure.kind) {
    case 'aborted':
      return { code: InboxErrorCodes.TRANSACTION_ABORTED, text: describeFailure(failure), stored: describeFailure(failure) };
    case 'ended':
      return { code: InboxErrorCodes.TRANSACTION_ENDED, text: describeFailure(failure), stored: describeFailure(failure) };
    case 'conflict': {
      const text = `the handler's statements hit serialization failures or deadlocks through ${transactionRetries} re-runs: ${describeError(failure.error)}`;
      return { code: InboxErrorCodes.TRANSACTION_CONFLICT, text, stored: text };
    }
    default: {
      const error = failure.error;
      const code = isInboxError(error) ? error.code : permanent ? InboxErrorCodes.PERMANENT_FAILURE : InboxErrorCodes.HANDLER_FAILED;
      return { code, text: `handler failed: ${describeError(error)}`, stored: describeError(error) };
    }
  }
}

/**
 * @internal Turns a transaction that did not commit into an outcome. Infrastructure (outages, a
 * concurrent copy holding the row, missing tables, inbox statements failing) is `retry` without
 * counting an attempt: the message did nothing wrong. Everything the handler caused is counted in
 * the durable attempts ledger, the one source of truth for attempts, then becomes `retry` with
 * backoff, or `dead-letter` when permanent or exhausted. The broker's delivery count is used only
 * when the ledger cannot be written for a reason other than an outage.
 */
export async function outcomeOfFailure(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: Pick<InboxStore, 'recordFailure' | 'uncountAttempt'>,
  message: InboxMessage,
  failure: TransactionFailure,
  countedAhead = false,
): Promise<InboxOutcome> {
  // An attempt counted before it ran (a redelivery, see unfinished-attempts.ts) that failed for a
  // reason that is not the message's is taken back; one the handler failed keeps that count.
  if (countedAhead && !isCounted(failure)) await store.uncountAttempt(options.db, message.id);
  const retry = (code: InboxErrorCode, reason: string, text: string) => infrastructureRetry(options, message, code, reason, text, failure.error);
  switch (failure.kind) {
    case 'outage':
      return retry(InboxErrorCodes.DATABASE_UNAVAILABLE, OutcomeReasons.DATABASE_UNAVAILABLE, 'database unavailable');
    case 'busy':
      return retry(InboxErrorCodes.LOCK_TIMEOUT, OutcomeReasons.IN_PROGRESS, 'another copy of this message is still being processed');
    case 'stopping':
      return retry(InboxErrorCodes.CONSUMER_STOPPING, OutcomeReasons.CONSUMER_STOPPING, 'retried, not counted');
    case 'table-missing':
      return retry(
        InboxErrorCodes.INBOX_TABLE_MISSING,
        OutcomeReasons.INBOX_TABLE_MISSING,
        'the inbox tables are missing; run migrate(db, { schema, table }) or your drizzle-kit migration',
      );
    case 'inbox-query':
      return retry(InboxErrorCodes.INBOX_QUERY_FAILED, OutcomeReasons.INBOX_QUERY_FAILED, 'an inbox statement failed');
    case 'conflict':
      if (!failure.counted) {
        return retry(
          InboxErrorCodes.TRANSACTION_CONFLICT,
          OutcomeReasons.TRANSACTION_CONFLICT,
          'serialization failures or deadlocks outlasted the transparent retries',
        );
      }
      break;
    default:
      break;
  }

  const { permanent, problem } = failure.kind === 'handler' ? permanence(options, failure.error) : { permanent: false, problem: undefined };
  const { code, text, stored } = describeCounted(failure, permanent, options.transactionRetries);

  let record: AttemptRecord | undefined;
  let notRecorded: unknown;
  try {
    record = await store.recordFailure(options.db, message.id, { message: stored, code: String(code) }, countedAhead);
  } catch (recordError) {
    const [retryCode, reason] = inboxStatementFailure(recordError);
    if (!permanent && retryCode !== InboxErrorCodes.INBOX_QUERY_FAILED) {
      // Nothing can be counted while the database is away: that is an outage, not a failed attempt.
      return infrastructureRetry(options, message, retryCode, reason, `${text}; and the attempt could not be recorded`, recordError);
    }
    notRecorded = recordError;
  }

  const attempt = record?.attempts ?? message.attempt ?? 1;
  const notes = [
    problem === undefined ? undefined : `isPermanent threw: ${describeError(problem)}`,
    notRecorded === undefined ? undefined : `the attempt could not be recorded (${describeError(notRecorded)}); counting the broker's delivery count instead`,
  ].filter((note) => note !== undefined);
  const details = { consumer: options.consumer, attempt, ...(notes.length > 0 ? { notes } : {}) };
  const error =
    failure.kind === 'handler' && isInboxError(failure.error) && notes.length === 0
      ? failure.error
      : new InboxError(code, notes.length === 0 ? text : `${text} (${notes.join('; ')})`, { cause: failure.error, messageIds: [message.id], details });
  const base = { messageId: message.id, consumer: options.consumer, attempt, firstAttemptAt: record?.firstAttemptAt, lastAttemptAt: record?.lastAttemptAt };
  if (permanent) {
    return { ...base, status: 'dead-letter', reason: OutcomeReasons.PERMANENT_FAILURE, error };
  }
  if (attempt >= options.maxAttempts) {
    const exhausted = new InboxError(
      InboxErrorCodes.MAX_ATTEMPTS_EXCEEDED,
      `failed ${attempt} times (maxAttempts ${options.maxAttempts}); last error: ${error.message}`,
      { cause: failure.error, messageIds: [message.id], details: { ...details, lastErrorCode: code } },
    );
    return { ...base, status: 'dead-letter', reason: OutcomeReasons.MAX_ATTEMPTS_EXCEEDED, error: exhausted };
  }
  return { ...base, status: 'retry', reason: OutcomeReasons.HANDLER_FAILED, error, retryAfterMs: backoffDelay(attempt, options.backoff) };
}

/**
 * @internal The last resort of a processor: something in inboxed itself threw where it never should.
 * The message is retried (not counted, so a bug in inboxed never dead-letters your messages) and
 * the outcome says so loudly. Anything committed before the throw is found as a duplicate then.
 */
export function internalFailure(options: ResolvedOptions<AnyPgDatabase, unknown>, delivery: unknown, error: unknown): InboxOutcome {
  let messageId = '';
  try {
    messageId = displayMessageId((delivery as { id?: unknown } | null)?.id);
  } catch {
    // a hostile getter: keep the empty id
  }
  return {
    status: 'retry',
    messageId,
    consumer: options.consumer,
    reason: OutcomeReasons.INTERNAL_ERROR,
    error: new InboxError(InboxErrorCodes.INTERNAL_ERROR, `inboxed failed unexpectedly (please report this): ${describeError(error)}`, {
      cause: error,
      messageIds: [messageId],
    }),
    attempt: 1,
    retryAfterMs: backoffDelay(1, options.backoff),
  };
}
