// The SQS side of the conformance suite and the soak (test/conformance): queues on the test SQS
// endpoint (fauxqs, LocalStack or SQS_ENDPOINT), consumers with fast test settings, and the consumer
// the shared worker process runs. The package's own SQS-specific tests build on it too.
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  type Message,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  SendMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { AnyInboxProcessor, InboxOutcome } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';
import { uniqueName } from '@inboxed/test-support/unique-name';
import { requiredEnv } from '@inboxed/test-support/worker-env';
import type { BrokerHarness, ConsumerSettings, DeadLetter } from '../../../test/conformance/harness.js';
import type {} from '../../../test/support/sqs-setup.js';
import { createSqsConsumer, type SqsConsumerOptions } from '../src/index.js';
import { publish, queueDepth, sqsClient } from './sqs-queues.js';

export { queueDepth, sqsClient } from './sqs-queues.js';

/** The visibility timeout of test queues, in seconds: short, so a killed worker's messages come back fast (heartbeats keep running ones). */
const VISIBILITY_TIMEOUT_SECONDS = 3;
/** How long `deadLetters()` keeps what it read invisible to others: longer than any test. */
const DEAD_LETTER_READ_SECONDS = 900;

/** How a harness sets its queues up. */
export interface SqsHarnessOptions {
  /** FIFO queues (`.fifo`, main and dead-letter). */
  fifo?: boolean;
  /** Extra attributes of the main queue (`VisibilityTimeout` defaults to 3). */
  attributes?: Record<string, string>;
  /**
   * The dead-letter target: `'queue'` a DLQ whose URL consumers get as `deadLetterQueueUrl`;
   * `{ redrive }` a DLQ named in the main queue's redrive policy (consumers get no URL); `'none'` neither.
   * @defaultValue 'queue'
   */
  deadLetter?: 'queue' | 'none' | { redrive: { maxReceiveCount: number } };
}

/** The conformance harness of SQS, plus what the package's own tests need. */
export interface SqsHarness extends BrokerHarness {
  readonly endpoint: string;
  readonly client: SQSClient;
  readonly queueUrl: string;
  /** The DLQ (given to consumers as `deadLetterQueueUrl`, or the redrive policy's target). */
  readonly deadLetterQueueUrl: string | undefined;
  /** The options `createConsumer` uses, with `extra` on top. */
  consumerOptions(handler: AnyInboxProcessor, extra?: Partial<SqsConsumerOptions>): SqsConsumerOptions;
  /** Sends one message (`id` in the `message-id` attribute); resolves with the SQS `MessageId`. */
  send(body: unknown, options?: { id?: string; group?: string; dedup?: string; attributes?: Record<string, MessageAttributeValue> }): Promise<string>;
  /** Every message in the dead-letter queue so far, as received (reads do not consume it). */
  deadLetterMessages(): Promise<Message[]>;
}

const endpointOf = async (): Promise<string> => {
  // Imported here, not at the top: the worker process loads this module outside vitest.
  const { requireService } = await import('@inboxed/test-support/services');
  return requireService('sqsEndpoint');
};

/** Queues of its own (from `uniqueName`) on the test endpoint; created by `setup()`, deleted by `teardown()`. */
export function createHarness(options: SqsHarnessOptions = {}): SqsHarness {
  const suffix = options.fifo === true ? '.fifo' : '';
  const fifoAttributes: Record<string, string> = options.fifo === true ? { FifoQueue: 'true' } : {};
  const deadLetter = options.deadLetter ?? 'queue';
  let endpoint = '';
  let client: SQSClient | undefined;
  let queueUrl = '';
  let deadLetterQueueUrl: string | undefined;
  const deadLetterSeen = new Map<string, Message>();
  const need = () => {
    if (client === undefined) throw new Error('sqs harness: call setup() first');
    return client;
  };
  const createQueue = async (prefix: string, attributes: Record<string, string>) => {
    const name = uniqueName(prefix).replace(/_/g, '-') + suffix;
    const { QueueUrl } = await need().send(new CreateQueueCommand({ QueueName: name, Attributes: { ...attributes, ...fifoAttributes } }));
    return QueueUrl!;
  };

  const harness: SqsHarness = {
    broker: 'sqs',
    get endpoint() {
      return endpoint;
    },
    get client() {
      return need();
    },
    get queueUrl() {
      return queueUrl;
    },
    get deadLetterQueueUrl() {
      return deadLetterQueueUrl;
    },
    async setup() {
      endpoint = await endpointOf();
      client = sqsClient(endpoint);
      const attributes: Record<string, string> = { VisibilityTimeout: String(VISIBILITY_TIMEOUT_SECONDS), ...options.attributes };
      if (deadLetter !== 'none') {
        deadLetterQueueUrl = await createQueue('conf-dlq', {});
        if (typeof deadLetter === 'object') {
          const { Attributes } = await need().send(new GetQueueAttributesCommand({ QueueUrl: deadLetterQueueUrl, AttributeNames: ['QueueArn'] }));
          attributes.RedrivePolicy = JSON.stringify({ deadLetterTargetArn: Attributes!.QueueArn, maxReceiveCount: deadLetter.redrive.maxReceiveCount });
        }
      }
      queueUrl = await createQueue('conf', attributes);
    },
    async teardown() {
      if (client === undefined) return;
      for (const url of [queueUrl, deadLetterQueueUrl]) if (url) await client.send(new DeleteQueueCommand({ QueueUrl: url })).catch(() => undefined);
      client.destroy();
      client = undefined;
    },
    publish: (messages) => publish(need(), queueUrl, messages),
    async send(body, sendOptions = {}) {
      const attributes: Record<string, MessageAttributeValue> = { ...sendOptions.attributes };
      if (sendOptions.id !== undefined) attributes['message-id'] = { DataType: 'String', StringValue: sendOptions.id };
      const result = await need().send(
        new SendMessageCommand({
          QueueUrl: queueUrl,
          MessageBody: typeof body === 'string' ? body : JSON.stringify(body),
          MessageAttributes: Object.keys(attributes).length > 0 ? attributes : undefined,
          MessageGroupId: sendOptions.group,
          MessageDeduplicationId: sendOptions.dedup,
        }),
      );
      return result.MessageId!;
    },
    consumerOptions: (handler, extra = {}) => ({
      client: need(),
      queueUrl,
      ...(deadLetter === 'queue' ? { deadLetterQueueUrl } : {}),
      handler,
      waitTimeSeconds: 1,
      stopTimeoutMs: 10_000,
      redeliveryBackoff: { baseDelayMs: 200, maxDelayMs: 1000 },
      receiveBackoff: { baseDelayMs: 100, maxDelayMs: 1000 },
      ...extra,
    }),
    createConsumer: (handler: AnyInboxProcessor, settings: ConsumerSettings = {}): InboxConsumer =>
      createSqsConsumer(harness.consumerOptions(handler, settings.stopTimeoutMs === undefined ? {} : { stopTimeoutMs: settings.stopTimeoutMs })),
    pending: () => queueDepth(need(), queueUrl),
    async deadLetterMessages() {
      if (deadLetterQueueUrl === undefined) return [];
      // Each read receives what is new and keeps it invisible for the rest of the test; what was read before is remembered.
      for (;;) {
        const { Messages = [] } = await need().send(
          new ReceiveMessageCommand({
            QueueUrl: deadLetterQueueUrl,
            MaxNumberOfMessages: 10,
            WaitTimeSeconds: 0,
            VisibilityTimeout: DEAD_LETTER_READ_SECONDS,
            MessageAttributeNames: ['All'],
            MessageSystemAttributeNames: ['All'],
          }),
        );
        for (const message of Messages) deadLetterSeen.set(message.MessageId!, message);
        if (Messages.length === 0) return [...deadLetterSeen.values()];
      }
    },
    async deadLetters(): Promise<DeadLetter[]> {
      const attribute = (message: Message, name: string) => message.MessageAttributes?.[name]?.StringValue;
      return (await harness.deadLetterMessages()).map((message) => ({
        id: attribute(message, 'x-inboxed-message-id'),
        reason: attribute(message, 'x-inboxed-reason'),
        errorCode: attribute(message, 'x-inboxed-error-code'),
        body: message.Body ?? '',
      }));
    },
    workerEnv: () => ({
      SQS_ENDPOINT: endpoint,
      SQS_QUEUE_URL: queueUrl,
      ...(deadLetterQueueUrl === undefined ? {} : { SQS_DEAD_LETTER_QUEUE_URL: deadLetterQueueUrl }),
      SQS_VISIBILITY_TIMEOUT_SECONDS: String(VISIBILITY_TIMEOUT_SECONDS),
    }),
  };
  return harness;
}

/** The consumer of the shared worker process (test/conformance/worker.ts), from `workerEnv()`. */
export function createWorkerConsumer(
  env: NodeJS.ProcessEnv,
  handler: AnyInboxProcessor,
  beforeSettle: (outcome: InboxOutcome) => void | Promise<void>,
): InboxConsumer {
  const required = (name: string) => requiredEnv(env, name, 'sqs worker');
  return createSqsConsumer({
    client: sqsClient(required('SQS_ENDPOINT')),
    queueUrl: required('SQS_QUEUE_URL'),
    deadLetterQueueUrl: env.SQS_DEAD_LETTER_QUEUE_URL,
    handler,
    beforeSettle,
    visibilityTimeoutSeconds: Number(env.SQS_VISIBILITY_TIMEOUT_SECONDS ?? VISIBILITY_TIMEOUT_SECONDS),
    concurrency: Number(env.SQS_CONCURRENCY ?? 4),
    waitTimeSeconds: 1,
    stopTimeoutMs: 5000,
    redeliveryBackoff: { baseDelayMs: 200, maxDelayMs: 1000 },
    receiveBackoff: { baseDelayMs: 100, maxDelayMs: 1000 },
  });
}
