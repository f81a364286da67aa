import type { AnyInboxProcessor, InboxError } from '@inboxed/core';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';
import type { QueueInfo } from './sqs-queue-info.js';

/** The least `maxReceiveCount` considered safe whatever the processor's `maxAttempts`. */
export const MIN_SAFE_MAX_RECEIVE_COUNT = 10;

/**
 * The processor's `maxAttempts` (processors from `withInbox` and `withInboxBatch` carry it), else
 * undefined: a hand-made processor, judged by {@link MIN_SAFE_MAX_RECEIVE_COUNT} alone.
 */
function exposedMaxAttempts(processor: AnyInboxProcessor): number | undefined {
  const value: unknown = processor.maxAttempts;
  return typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : undefined;
}

/** The smallest `maxReceiveCount` comfortably above `maxAttempts`: twice it, and never below {@link MIN_SAFE_MAX_RECEIVE_COUNT}. */
export function safeMaxReceiveCount(maxAttempts: number | undefined): number {
  return Math.max(MIN_SAFE_MAX_RECEIVE_COUNT, 2 * (maxAttempts ?? 0));
}

/**
 * The `SQS_REDRIVE_RECEIVE_COUNT_LOW` finding when the queue's redrive policy may move messages to
 * its DLQ before inboxed decides anything. SQS counts every receive toward `maxReceiveCount`;
 * inboxed counts only handler failures toward `maxAttempts`, and retries that are nobody's fault (the
 * database away, a concurrent copy holding the row, a busy lease, a failed delete) use receives too.
 * A message SQS moves on its own has no `x-inboxed-*` reason and no dead-letter record. Undefined when
 * the queue has no redrive policy or a `maxReceiveCount` of at least {@link safeMaxReceiveCount}.
 */
export function redriveReceiveCountProblem(info: QueueInfo, processor: AnyInboxProcessor, queueUrl: string): InboxError | undefined {
  if (info.redrive === undefined) return undefined;
  const { maxReceiveCount, deadLetterTargetArn } = info.redrive;
  const maxAttempts = exposedMaxAttempts(processor);
  const recommended = safeMaxReceiveCount(maxAttempts);
  if (maxReceiveCount >= recommended) return undefined;
  const budget = maxAttempts === undefined ? '' : ` (the processor's maxAttempts is ${maxAttempts})`;
  return toSqsError(
    SqsErrorCodes.REDRIVE_RECEIVE_COUNT_LOW,
    `${queueUrl}'s redrive policy moves a message to ${deadLetterTargetArn} after ${maxReceiveCount} receives${budget}; ` +
      'every receive counts, retries that do not count toward maxAttempts (database outage, busy, in-progress) included, ' +
      `so SQS may dead-letter a message with no inboxed reason or record. Use a maxReceiveCount of at least ${recommended}, ` +
      'or no redrive policy and deadLetterQueueUrl',
    undefined,
    { details: { queueUrl, maxReceiveCount, maxAttempts, recommendedMaxReceiveCount: recommended } },
  );
}
