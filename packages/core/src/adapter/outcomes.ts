import type { InboxError } from '../errors.js';
import type { InboxOutcome, InboxStatus } from '../types.js';

/** What a broker adapter does with a delivery, given its outcome. */
export type OutcomeAction = 'ack' | 'retry' | 'dead-letter';

/**
 * The one mapping from outcome to broker action, shared by every adapter:
 * `processed`, `duplicate`, `rejected` -> ack; `retry`, `busy` -> redeliver later (`busy` never counts an
 * attempt); `dead-letter`, `conflict` -> dead-letter, then ack.
 */
export function actionFor(status: InboxStatus): OutcomeAction {
  switch (status) {
    case 'processed':
    case 'duplicate':
    case 'rejected':
      return 'ack';
    case 'retry':
    case 'busy':
      return 'retry';
    case 'dead-letter':
    case 'conflict':
      return 'dead-letter';
  }
}

/**
 * An outcome decided by the adapter before the processor could run (no message id, unparseable
 * body): always `dead-letter`, so the delivery is kept with its reason rather than dropped.
 */
export function adapterDeadLetter(args: { messageId: string; consumer: string; reason: string; error: InboxError; attempt?: number }): InboxOutcome {
  return { status: 'dead-letter', messageId: args.messageId, consumer: args.consumer, reason: args.reason, error: args.error, attempt: args.attempt ?? 1 };
}

/** Header names adapters attach to dead-lettered messages, identical across brokers. */
export const DeadLetterHeaders = {
  REASON: 'x-inboxed-reason',
  ERROR: 'x-inboxed-error',
  ERROR_CODE: 'x-inboxed-error-code',
  CONSUMER: 'x-inboxed-consumer',
  MESSAGE_ID: 'x-inboxed-message-id',
  ATTEMPT: 'x-inboxed-attempt',
  FIRST_ATTEMPT_AT: 'x-inboxed-first-attempt-at',
  LAST_ATTEMPT_AT: 'x-inboxed-last-attempt-at',
  DEAD_LETTERED_AT: 'x-inboxed-dead-lettered-at',
} as const;

/**
 * The metadata every dead-letter carries, as string headers: reason, error, error code, consumer,
 * message id, attempt, first/last attempt time. Adapters add transport specifics (original
 * topic/partition/offset, queue) next to these.
 */
export function deadLetterHeaders(outcome: InboxOutcome, now: Date = new Date()): Record<string, string> {
  const headers: Record<string, string> = {
    [DeadLetterHeaders.REASON]: outcome.reason ?? outcome.status,
    [DeadLetterHeaders.CONSUMER]: outcome.consumer,
    [DeadLetterHeaders.MESSAGE_ID]: outcome.messageId,
    [DeadLetterHeaders.ATTEMPT]: String(outcome.attempt ?? 1),
    [DeadLetterHeaders.FIRST_ATTEMPT_AT]: (outcome.firstAttemptAt ?? now).toISOString(),
    [DeadLetterHeaders.LAST_ATTEMPT_AT]: (outcome.lastAttemptAt ?? now).toISOString(),
    [DeadLetterHeaders.DEAD_LETTERED_AT]: now.toISOString(),
  };
  if (outcome.error !== undefined) {
    // Headers are not log files: keep them bounded (AMQP header tables and SQS attributes have limits).
    headers[DeadLetterHeaders.ERROR] = outcome.error.message.slice(0, 1024);
    headers[DeadLetterHeaders.ERROR_CODE] = String(outcome.error.code);
  }
  return headers;
}

/**
 * How long to wait before a delivery that is redelivered later (`retry`, `busy`) comes back, in ms;
 * `undefined` for outcomes that are settled for good.
 */
export function redeliverAfterMs(outcome: InboxOutcome): number | undefined {
  return outcome.status === 'retry' || outcome.status === 'busy' ? outcome.retryAfterMs : undefined;
}
