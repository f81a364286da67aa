import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
  type Message,
  type MessageAttributeValue,
} from '@aws-sdk/client-sqs';
import { migrate, withInbox, type InboxError, type InboxMessage, type InboxProcessor } from '@inboxed/core';
import { afterEach, beforeEach } from 'vitest';
import { createSqsConsumer, type SqsConsumer, type SqsConsumerOptions } from '../sqs-consumer.js';
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
export async function createQueue(
  client: SQSClient,
  prefix: string,
  attributes: Record<string, string> = {},
  fifo = false,
): Promise<{ url: string; arn: string }> {
  const name = uniqueName(prefix).replace(/_/g, '-') + (fifo ? '.fifo' : '');
  const { QueueUrl } = await client.send(new CreateQueueCommand({ QueueName: name, Attributes: { ...attributes, ...(fifo ? { FifoQueue: 'true' } : {}) } }));
  const { Attributes } = await client.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['QueueArn'] }));
  return { url: QueueUrl!, arn: Attributes!.QueueArn! };
}

/** Sends one message; `id` goes into the `message-id` attribute. */
export async function send(
  client: SQSClient,
  queueUrl: string,
  body: unknown,
  options: { id?: string; group?: string; dedup?: string; attributes?: Record<string, MessageAttributeValue> } = {},
): Promise<string> {
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

/** Receives (and leaves invisible for a minute) everything currently visible in a queue, e.g. a DLQ. */
export async function receiveAll(client: SQSClient, queueUrl: string, expected: number, timeoutMs = 10_000): Promise<Message[]> {
  const out: Message[] = [];
  const deadline = Date.now() + timeoutMs;
  while (out.length < expected && Date.now() < deadline) {
    const { Messages = [] } = await client.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 1,
        VisibilityTimeout: 60,
        MessageAttributeNames: ['All'],
        MessageSystemAttributeNames: ['All'],
      }),
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

export type Handler = (message: InboxMessage, tx: any) => Promise<unknown> | unknown;

/**
 * Per-test plumbing for consumer tests: a fresh schema, a client, consumers stopped afterwards and
 * every `error` event collected. Call at the top of a `describe`.
 */
export interface SqsTestContext {
  t: TestDatabase;
  client: SQSClient;
  consumers: SqsConsumer[];
  errors: InboxError[];
  insertEffect: Handler;
  inbox(handler?: Handler, extra?: Record<string, unknown>): InboxProcessor;
  start(options: Partial<SqsConsumerOptions> & Pick<SqsConsumerOptions, 'queueUrl' | 'handler'>, client?: SQSClient): Promise<SqsConsumer>;
}

export function sqsTestContext(): SqsTestContext {
  const ctx: SqsTestContext = {
    t: undefined as unknown as TestDatabase,
    client: undefined as unknown as SQSClient,
    consumers: [] as SqsConsumer[],
    errors: [] as InboxError[],
    /** Inserts one `effects` row per message. */
    insertEffect: (async (message, tx) => {
      await tx.insert(ctx.t.effects).values({ messageId: message.id, value: message.payload });
    }) as Handler,
    /** A `withInbox` processor on the test schema; backoff 1 s doubling, no jitter. */
    inbox(handler: Handler = ctx.insertEffect, extra: Record<string, unknown> = {}) {
      return withInbox(handler as never, {
        db: ctx.t.db,
        consumer: 'notifications',
        tables: { schema: ctx.t.schema },
        backoff: { baseDelayMs: 1000, jitter: 'none' },
        ...extra,
      });
    },
    /** Creates, tracks and starts a consumer (1 s long polls, errors collected). */
    async start(options: Partial<SqsConsumerOptions> & Pick<SqsConsumerOptions, 'queueUrl' | 'handler'>, client: SQSClient = ctx.client): Promise<SqsConsumer> {
      const consumer = createSqsConsumer({ client, waitTimeSeconds: 1, stopTimeoutMs: 10_000, ...options });
      consumer.on('error', (error) => ctx.errors.push(error));
      ctx.consumers.push(consumer);
      await consumer.start();
      return consumer;
    },
  };
  beforeEach(async () => {
    ctx.t = await inboxDatabase('sqs');
    ctx.client = sqsClient();
    ctx.errors.length = 0;
  });
  afterEach(async () => {
    await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
    ctx.client.destroy();
    await ctx.t.close();
  });
  return ctx;
}
