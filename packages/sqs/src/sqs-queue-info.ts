import { GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { callWithTimeout, SQS_CALL_TIMEOUT_MS } from './sqs-call.js';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';

/** What the adapter needs to know about a queue, read once with `GetQueueAttributes`. */
export interface QueueInfo {
  /** The queue's default visibility timeout, in seconds. */
  visibilityTimeoutSeconds: number;
  fifo: boolean;
  /** The queue's `MessageRetentionPeriod`, in seconds (absent when SQS did not return it). */
  retentionPeriodSeconds?: number;
  /** The queue's redrive policy, when it has one. */
  redrive?: { deadLetterTargetArn: string; maxReceiveCount: number };
}

/** Reads the queue's visibility timeout, FIFO flag, retention period and redrive policy. Throws `SQS_QUEUE_UNAVAILABLE`. */
export async function readQueueInfo(client: SQSClient, queueUrl: string): Promise<QueueInfo> {
  let attributes: Record<string, string>;
  try {
    const command = new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['VisibilityTimeout', 'RedrivePolicy', 'FifoQueue', 'MessageRetentionPeriod'],
    });
    const result = await callWithTimeout('GetQueueAttributes', SQS_CALL_TIMEOUT_MS, (abortSignal) => client.send(command, { abortSignal }));
    attributes = result.Attributes ?? {};
  } catch (error) {
    throw toSqsError(SqsErrorCodes.QUEUE_UNAVAILABLE, `cannot read the attributes of ${queueUrl}`, error, { details: { queueUrl } });
  }
  const info: QueueInfo = {
    visibilityTimeoutSeconds: Number(attributes.VisibilityTimeout ?? 30),
    fifo: attributes.FifoQueue === 'true' || isFifoQueueUrl(queueUrl),
  };
  const retention = Number(attributes.MessageRetentionPeriod);
  if (attributes.MessageRetentionPeriod !== undefined && Number.isFinite(retention)) info.retentionPeriodSeconds = retention;
  if (attributes.RedrivePolicy !== undefined) {
    try {
      const policy = JSON.parse(attributes.RedrivePolicy) as { deadLetterTargetArn?: string; maxReceiveCount?: number | string };
      if (policy.deadLetterTargetArn !== undefined) {
        info.redrive = { deadLetterTargetArn: policy.deadLetterTargetArn, maxReceiveCount: Number(policy.maxReceiveCount ?? 0) };
      }
    } catch {
      // A malformed policy is SQS's business; we only use it to describe where dead-letters go.
    }
  }
  return info;
}

/** The `dead_letter` event destination when the adapter leaves a message to the queue's redrive policy. */
export function redriveDestination(info: QueueInfo | undefined): string {
  return info?.redrive !== undefined
    ? `redrive-policy:${info.redrive.deadLetterTargetArn} (after maxReceiveCount ${info.redrive.maxReceiveCount})`
    : 'redrive-policy:none (no deadLetterQueueUrl and no redrive policy: redelivered with backoff)';
}

/** True for a FIFO queue URL (its name ends in `.fifo`). */
export function isFifoQueueUrl(queueUrl: string): boolean {
  return queueUrl.replace(/\/+$/, '').endsWith('.fifo');
}
