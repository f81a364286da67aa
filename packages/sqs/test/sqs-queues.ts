// Plain SQS plumbing of the tests: a client on the test endpoint, queue depth, fast publishing.
import { GetQueueAttributesCommand, SendMessageBatchCommand, type SendMessageBatchRequestEntry, SQSClient } from '@aws-sdk/client-sqs';
import type { PublishedMessage } from '../../../test/conformance/harness.js';

/** `SendMessageBatch` calls in flight at once while publishing. */
const PUBLISH_PARALLELISM = 16;

/** A client on an SQS endpoint with the emulator's dummy credentials. */
export function sqsClient(endpoint: string, extra: { maxAttempts?: number } = {}): SQSClient {
  return new SQSClient({ endpoint, region: process.env.AWS_REGION ?? 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' }, ...extra });
}

/** Deliveries not yet deleted: visible, in flight (including those waiting out a retry's visibility) and delayed. */
export async function queueDepth(client: SQSClient, queueUrl: string): Promise<number> {
  const { Attributes = {} } = await client.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
    }),
  );
  return (
    Number(Attributes.ApproximateNumberOfMessages ?? 0) +
    Number(Attributes.ApproximateNumberOfMessagesNotVisible ?? 0) +
    Number(Attributes.ApproximateNumberOfMessagesDelayed ?? 0)
  );
}

/**
 * Publishes with `SendMessageBatch`, 10 per call and up to {@link PUBLISH_PARALLELISM} calls in
 * flight, started in order; entries SQS reports as failed (or calls that throw) are sent again.
 */
export async function publish(client: SQSClient, queueUrl: string, messages: PublishedMessage[]): Promise<void> {
  const batches: SendMessageBatchRequestEntry[][] = [];
  messages.forEach((message, i) => {
    const entry: SendMessageBatchRequestEntry = {
      Id: `m${i % 10}`,
      MessageBody: message.body ?? JSON.stringify(message.payload ?? null),
      ...(message.id === undefined ? {} : { MessageAttributes: { 'message-id': { DataType: 'String', StringValue: message.id } } }),
    };
    if (i % 10 === 0) batches.push([]);
    batches.at(-1)!.push(entry);
  });
  let next = 0;
  const lane = async () => {
    while (next < batches.length) {
      let entries = batches[next++]!;
      for (let attempt = 1; entries.length > 0; attempt++) {
        try {
          const { Failed = [] } = await client.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
          const failed = new Set(Failed.map((f) => f.Id));
          entries = entries.filter((e) => failed.has(e.Id));
          if (entries.length > 0 && attempt >= 5) throw new Error(`publish: SQS refused ${Failed.map((f) => `${f.Code} ${f.Message}`).join('; ')}`);
        } catch (error) {
          if (attempt >= 5) throw error;
        }
        if (entries.length > 0) await new Promise((r) => setTimeout(r, 100 * attempt));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(PUBLISH_PARALLELISM, batches.length) }, lane));
}
