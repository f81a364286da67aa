import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
  type Message,
  type MessageAttributeValue,
} from '@aws-sdk/client-sqs';
import { migrate } from '@inboxed/core';
import { createTestDatabase, requireService, uniqueName, type TestDatabase } from '@inboxed/test-support';
import type {} from '../../../../test/support/sqs-setup.js';

/** A client on the test SQS endpoint (fauxqs, LocalStack or SQS_ENDPOINT). */
export function sqsClient(): SQSClient {
  return new SQSClient({
    endpoint: requireService('sqsEndpoint'),
    region: process.env.AWS_REGION ?? 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
}

/** Creates a uniquely named queue (FIFO when `fifo`), returns its URL and ARN. */
export async function createQueue(client: SQSClient, prefix: string, attributes: Record<string, string> = {}, fifo = false): Promise<{ url: string; arn: string }> {
  const name = uniqueName(prefix).replace(/_/g, '-') + (fifo ? '.fifo' : '');
  const { QueueUrl } = await client.send(new CreateQueueCommand({ QueueName: name, Attributes: { ...attributes, ...(fifo ? { FifoQueue: 'true' } : {}) } }));
  const { Attributes } = await client.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['QueueArn'] }));
  return { url: QueueUrl!, arn: Attributes!.QueueArn! };
}

/** Sends one message; `id` goes into the `message-id` attribute. */
export async function send(client: SQSClient, queueUrl: string, body: unknown, options: { id?: string; group?: string; dedup?: string; attributes?: Record<string, MessageAttributeValue> } = {}): Promise<string> {
  const attributes: Record<string, MessageAttributeValue> = { ...options.attributes };
  if (options.id !== undefined) attributes['message-id'] = { DataType: 'String', StringValue: options.id };
  const result = await client.send(
    new SendMessageCommand({
      QueueUrl: queueUrl,
      MessageBody: typeof body === 'string' ? body : JSON.stringify(body),
      MessageAttributes: Object.keys(attributes).length > 0 ? attributes : undefined,
      MessageGroupId: options.group,
      MessageDeduplicationId: options.dedup,
    }),
  );
  return result.MessageId!;
}

/** Messages in the queue: visible, in flight and delayed. */
export async function queueDepth(client: SQSClient, queueUrl: string): Promise<number> {
  const { Attributes = {} } = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'] }),
  );
  return Number(Attributes.ApproximateNumberOfMessages ?? 0) + Number(Attributes.ApproximateNumberOfMessagesNotVisible ?? 0) + Number(Attributes.ApproximateNumberOfMessagesDelayed ?? 0);
}

/** Receives (and leaves invisible for a minute) everything currently visible in a queue, e.g. a DLQ. */
export async function receiveAll(client: SQSClient, queueUrl: string, expected: number, timeoutMs = 10_000): Promise<Message[]> {
  const out: Message[] = [];
  const deadline = Date.now() + timeoutMs;
  while (out.length < expected && Date.now() < deadline) {
    const { Messages = [] } = await client.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }),
    );
    out.push(...Messages);
  }
  return out;
}

/** A fresh PostgreSQL schema with the inbox tables and an `effects` table. */
export async function inboxDatabase(label: string): Promise<TestDatabase> {
  const t = await createTestDatabase('node-postgres', { label, poolSize: 10 });
  await migrate(t.db, { schema: t.schema });
  return t;
}
