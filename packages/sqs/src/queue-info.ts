import { GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';
import { isFifoQueueUrl } from './sqs-dead-letter.js';

/** What the adapter needs to know about a queue, read once with `GetQueueAttributes`. */
export interface QueueInfo {
  /** The queue's default visibility timeout, in seconds. */
  visibilityTimeoutSeconds: number;
  fifo: boolean;
  /** The queue's redrive policy, when it has one. */
  redrive?: { deadLetterTargetArn: string; maxReceiveCount: number };
}

const cache = new WeakMap<SQSClient, Map<string, Promise<QueueInfo>>>();

/** Reads (once per client and queue) the queue's visibility timeout, FIFO flag and redrive policy. Throws `SQS_QUEUE_UNAVAILABLE`. */
export function loadQueueInfo(client: SQSClient, queueUrl: string): Promise<QueueInfo> {
  let perClient = cache.get(client);
  if (perClient === undefined) {
    perClient = new Map();
    cache.set(client, perClient);
  }
  let info = perClient.get(queueUrl);
  if (info === undefined) {
    info = fetchQueueInfo(client, queueUrl);
    perClient.set(queueUrl, info);
    // A failure must not be cached: the next call asks SQS again.
    info.catch(() => perClient.delete(queueUrl));
  }
  return info;
}

async function fetchQueueInfo(client: SQSClient, queueUrl: string): Promise<QueueInfo> {
  let attributes: Record<string, string>;
  try {
    const result = await client.send(
      new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['VisibilityTimeout', 'RedrivePolicy', 'FifoQueue'] }),
    );
    attributes = result.Attributes ?? {};
  } catch (error) {
    throw toSqsError(SqsErrorCodes.QUEUE_UNAVAILABLE, `cannot read the attributes of ${queueUrl}`, error, { details: { queueUrl } });
  }
  const info: QueueInfo = {
    visibilityTimeoutSeconds: Number(attributes.VisibilityTimeout ?? 30),
    fifo: attributes.FifoQueue === 'true' || isFifoQueueUrl(queueUrl),
  };
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
