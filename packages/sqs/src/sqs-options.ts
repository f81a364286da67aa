import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import {
  type BackoffOptions,
  type ConsumerEventEmitter,
  type ConsumerOptions,
  DEFAULT_STOP_TIMEOUT_MS,
  type MessageIdOptions,
  type PayloadMode,
  type RetentionGuardOptions,
  validateRetentionOptions,
} from '@inboxed/core/adapter';
import { invalidOption } from './sqs-errors.js';
import { messageMapping } from './sqs-message.js';
import { type ProcessingSettings, SqsProcessing } from './sqs-processing.js';
import { MAX_VISIBILITY_TIMEOUT_SECONDS } from './sqs-visibility.js';

/** Options of {@link createSqsHandler}; {@link createSqsConsumer} takes them all too. */
export interface SqsHandlerOptions extends Omit<ConsumerOptions<Message, 'attribute'>, 'stopTimeoutMs' | keyof RetentionGuardOptions> {
  /** The SQS client the messages are received (and deleted, extended, dead-lettered) with. */
  client: SQSClient;
  /** The queue the messages come from. */
  queueUrl: string;
  /**
   * Where the message id is, tried in this order: `extract(message)`, the `attribute` message
   * attribute, the FIFO `MessageDeduplicationId` when the producer set it (not one SQS generated for
   * `ContentBasedDeduplication`: that is the body's hash), then, only with `fallback: true`, the SQS
   * `MessageId` (stable across redeliveries, not across a producer's retries). No id: dead-lettered
   * as `missing-message-id`.
   * @defaultValue `{ attribute: 'message-id', fallback: false }`
   */
  messageId?: MessageIdOptions<Message, 'attribute'> | undefined;
  /**
   * How bodies are decoded: `'json'`, `'content-type'` (JSON when the `content-type` message
   * attribute says so, else a `Buffer`) or `'raw'` (always a `Buffer`).
   * @defaultValue 'json'
   */
  payload?: PayloadMode | undefined;
  /**
   * Where `dead-letter` and `conflict` outcomes go: a copy with the reason attributes is sent there,
   * then the original is deleted. Without it, the message is left to the queue's redrive policy (not
   * deleted, visible again after `redeliveryBackoff` until `maxReceiveCount` moves it). SQS counts
   * every receive, uncounted retries too: keep `maxReceiveCount` well above `maxAttempts` (`start()`
   * reports `SQS_REDRIVE_RECEIVE_COUNT_LOW` otherwise).
   * @defaultValue none (the queue's redrive policy)
   */
  deadLetterQueueUrl?: string | undefined;
  /**
   * The visibility timeout the messages are received with, in seconds (0-43200); heartbeats extend
   * running messages to it.
   * @defaultValue the queue's `VisibilityTimeout`
   */
  visibilityTimeoutSeconds?: number | undefined;
  /**
   * How often the visibility of running messages is extended, in ms; `0` disables heartbeats. Must
   * be shorter than the visibility timeout.
   * @defaultValue a third of the visibility timeout, at least 500
   */
  heartbeatIntervalMs?: number | undefined;
  /**
   * Backoff of redeliveries whose outcome carries no `retryAfterMs` (dead-letters left to the redrive
   * policy, dead-letter sends that failed), on `ApproximateReceiveCount`. Capped at 12 hours.
   * @defaultValue 1 s doubling to 5 min, full jitter
   */
  redeliveryBackoff?: BackoffOptions | undefined;
  /** Attempts of a `DeleteMessageBatch` entry before `SQS_DELETE_FAILED` is reported, 1-100. @defaultValue 3 */
  deleteAttempts?: number | undefined;
  /** FIFO processing: per `MessageGroupId`, in order. @defaultValue the queue's `FifoQueue` attribute */
  fifo?: boolean | undefined;
  /**
   * The most messages handed to a batch processor (`withInboxBatch`) in one call, 1-10: a receive is
   * split into calls of at most this many (one transaction each). Ignored by per-message processors.
   * @defaultValue 10
   */
  batchSize?: number | undefined;
}

/**
 * Options of {@link createSqsConsumer}. The retention guard (`inboxRetentionMs`, `strictRetention`,
 * `redeliveryHorizonMs`) compares with the queue's `MessageRetentionPeriod` at `start()`.
 */
export interface SqsConsumerOptions extends SqsHandlerOptions, RetentionGuardOptions {
  /** How long `stop()` waits for deliveries in flight, in ms. @defaultValue 30000 */
  stopTimeoutMs?: number | undefined;
  /** The most messages one `ReceiveMessage` returns (`MaxNumberOfMessages`), 1-10. @defaultValue 10 */
  receiveMaxMessages?: number | undefined;
  /** Pollers running side by side, each receiving and processing its own messages, 1-1000. @defaultValue 1 */
  concurrency?: number | undefined;
  /**
   * Long-polling wait of each receive, 0-20 seconds. A receive with no answer 10 s past it is aborted
   * (`SQS_RECEIVE_FAILED`). `0` (short polling) pauses 200 ms after an empty receive.
   * @defaultValue 20
   */
  waitTimeSeconds?: number | undefined;
  /** Backoff between failed receives (each reported as `SQS_RECEIVE_FAILED`, then `reconnect`). @defaultValue 1 s doubling to 30 s, full jitter */
  receiveBackoff?: BackoffOptions | undefined;
}

/** The consumer's own settings, resolved. */
export interface ReceiveSettings {
  stopTimeoutMs: number;
  receiveMaxMessages: number;
  concurrency: number;
  waitTimeSeconds: number;
  receiveBackoff: BackoffOptions;
}

const DEFAULT_REDELIVERY_BACKOFF: BackoffOptions = { baseDelayMs: 1000, maxDelayMs: 300_000 };
const DEFAULT_RECEIVE_BACKOFF: BackoffOptions = { baseDelayMs: 1000, maxDelayMs: 30_000 };
const MAX_TIMER_MS = 2 ** 31 - 1;

function integerIn(value: number | undefined, fallback: number, min: number, max: number, name: string): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) invalidOption(`options.${name} must be an integer between ${min} and ${max}`);
  return v;
}

/** Validates the options both the consumer and the handler take (throws `INVALID_OPTIONS`), and builds the processing of receives. */
export function createProcessing(options: SqsHandlerOptions, events: ConsumerEventEmitter): SqsProcessing {
  if (options === null || typeof options !== 'object') invalidOption('options are required');
  const { client, queueUrl, handler } = options;
  if (client === null || typeof client !== 'object' || typeof (client as SQSClient).send !== 'function') invalidOption('options.client must be an SQSClient');
  if (typeof queueUrl !== 'string' || queueUrl === '') invalidOption('options.queueUrl must be a queue URL');
  if (options.deadLetterQueueUrl !== undefined && (typeof options.deadLetterQueueUrl !== 'string' || options.deadLetterQueueUrl === ''))
    invalidOption('options.deadLetterQueueUrl must be a queue URL');
  if (typeof handler !== 'function' || (handler.kind !== 'single' && handler.kind !== 'batch'))
    invalidOption('options.handler must be a processor from withInbox or withInboxBatch');
  if (options.visibilityTimeoutSeconds !== undefined)
    integerIn(options.visibilityTimeoutSeconds, 0, 0, MAX_VISIBILITY_TIMEOUT_SECONDS, 'visibilityTimeoutSeconds');
  if (options.heartbeatIntervalMs !== undefined) {
    integerIn(options.heartbeatIntervalMs, 0, 0, MAX_TIMER_MS, 'heartbeatIntervalMs');
    checkHeartbeat(options.heartbeatIntervalMs, options.visibilityTimeoutSeconds);
  }
  const { messageId, payload } = options;
  if (messageId !== undefined) {
    if (messageId.attribute !== undefined && (typeof messageId.attribute !== 'string' || messageId.attribute === ''))
      invalidOption('options.messageId.attribute must be a message attribute name');
    if (messageId.extract !== undefined && typeof messageId.extract !== 'function') invalidOption('options.messageId.extract must be a function');
  }
  if (payload !== undefined && payload !== 'json' && payload !== 'content-type' && payload !== 'raw')
    invalidOption("options.payload must be 'json', 'content-type' or 'raw'");
  const settings: ProcessingSettings = {
    client,
    queueUrl,
    processor: handler,
    deadLetterQueueUrl: options.deadLetterQueueUrl,
    mapping: messageMapping(messageId, payload, queueUrl),
    visibilityTimeoutSeconds: options.visibilityTimeoutSeconds,
    heartbeatIntervalMs: options.heartbeatIntervalMs,
    redeliveryBackoff: options.redeliveryBackoff ?? DEFAULT_REDELIVERY_BACKOFF,
    deleteAttempts: integerIn(options.deleteAttempts, 3, 1, 100, 'deleteAttempts'),
    fifo: options.fifo,
    batchSize: integerIn(options.batchSize, 10, 1, 10, 'batchSize'),
    beforeSettle: options.beforeSettle,
  };
  return new SqsProcessing(settings, events);
}

/** A heartbeat must come before the visibility lapses (`0` disables heartbeats). */
export function checkHeartbeat(heartbeatIntervalMs: number | undefined, visibilityTimeoutSeconds: number | undefined): void {
  if (heartbeatIntervalMs === undefined || heartbeatIntervalMs <= 0 || visibilityTimeoutSeconds === undefined) return;
  if (heartbeatIntervalMs >= visibilityTimeoutSeconds * 1000) {
    invalidOption(
      `options.heartbeatIntervalMs (${heartbeatIntervalMs}) must be shorter than the visibility timeout (${visibilityTimeoutSeconds} s), or 0 to disable heartbeats`,
    );
  }
}

/** Validates and resolves the consumer's own options (throws `INVALID_OPTIONS`). */
export function receiveSettings(options: SqsConsumerOptions): ReceiveSettings {
  validateRetentionOptions(options);
  return {
    stopTimeoutMs: integerIn(options.stopTimeoutMs, DEFAULT_STOP_TIMEOUT_MS, 0, MAX_TIMER_MS, 'stopTimeoutMs'),
    receiveMaxMessages: integerIn(options.receiveMaxMessages, 10, 1, 10, 'receiveMaxMessages'),
    concurrency: integerIn(options.concurrency, 1, 1, 1000, 'concurrency'),
    waitTimeSeconds: integerIn(options.waitTimeSeconds, 20, 0, 20, 'waitTimeSeconds'),
    receiveBackoff: options.receiveBackoff ?? DEFAULT_RECEIVE_BACKOFF,
  };
}
