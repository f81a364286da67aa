import { describeError } from '@inboxed/core';
import type { RedeliveryHorizon } from '@inboxed/core/adapter';
import type { QueueInfo } from './sqs-queue-info.js';

/**
 * @internal The redelivery horizon of an SQS queue: its `MessageRetentionPeriod` (60 s to 14 days),
 * counted from when a message was sent; receives and visibility timeouts do not extend it.
 */
export function sqsRedeliveryHorizon(info: QueueInfo, queueUrl: string): RedeliveryHorizon {
  const name = queueName(queueUrl);
  if (info.retentionPeriodSeconds === undefined) {
    return { kind: 'unknown', ms: null, source: `SQS queue ${name}`, detail: 'GetQueueAttributes returned no MessageRetentionPeriod' };
  }
  return { kind: 'bounded', ms: info.retentionPeriodSeconds * 1000, source: `SQS queue ${name} MessageRetentionPeriod` };
}

/** @internal The horizon when the queue's attributes could not be read. */
export function unreadSqsHorizon(queueUrl: string, error: unknown): RedeliveryHorizon {
  return { kind: 'unknown', ms: null, source: `SQS queue ${queueName(queueUrl)}`, detail: `GetQueueAttributes failed: ${describeError(error)}` };
}

const queueName = (queueUrl: string) => queueUrl.replace(/\/+$/, '').split('/').pop() ?? queueUrl;
