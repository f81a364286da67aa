import { InboxError, InboxErrorCodes, type AnyInboxProcessor, type InboxOutcome } from '@inboxed/core';
import type { BackoffOptions, ConsumerOptions, InboxLogger, MessageIdOptions, PayloadMode } from '@inboxed/core/adapter';
import type { DeadLetterTopicOption } from './kafka-dead-letter.js';
import type { KafkaDelivery, MessageMapping } from './kafka-message.js';
import type { KafkaConsumerConfigLike, KafkaLike, KafkaProducerConfigLike, KafkaProducerLike } from './kafka-types.js';

/** Options shared by {@link KafkaConsumerOptions} and the low-level `eachBatch`/`eachMessage` handlers. */
export interface KafkaProcessingOptions {
  /**
   * How a record's message id is found: `extract({ topic, partition, message })`, then the header
   * `header`, then, only with `fallback: true`, the record's identity `topic/partition/offset`
   * (stable across redeliveries of that record, but not across a producer writing it twice).
   * A record without an id is dead-lettered as `missing-message-id`.
   * @defaultValue `{ header: 'message-id', fallback: false }`
   */
  messageId?: MessageIdOptions<KafkaDelivery, 'header'>;
  /**
   * How values are decoded: `'json'` (a value that is not JSON is dead-lettered as
   * `unparseable-body`; a null value, a tombstone, becomes `null`), `'content-type'` (JSON only
   * when the `content-type` header says so, else the `Buffer`) or `'raw'` (always the `Buffer`).
   * @defaultValue `'json'`
   */
  payload?: PayloadMode;
  /**
   * The dead-letter topic: a name, or a function of the source topic.
   * @defaultValue `<topic>.dlq`
   */
  deadLetterTopic?: DeadLetterTopicOption;
  /**
   * How long a partition is held when no `retryAfterMs` says so: after a dead-letter record or an
   * offset commit that failed. (A `retry` outcome carries its own `retryAfterMs`, from `withInbox`'s
   * `backoff`; a `busy` one the time left on the other worker's lease.)
   * @defaultValue `{ baseDelayMs: 1000, maxDelayMs: 30000, jitter: 'full' }`
   */
  retryBackoff?: BackoffOptions;
  /**
   * The most messages handed to a batch processor (`withInboxBatch`) in one call, so one database
   * transaction and one offset commit per call; a fetched batch is processed in calls of at most
   * this many records, with a heartbeat between them. A per-message processor (`withInbox`) gets
   * one record per call and commits after each. (How much kafkajs fetches is set in
   * `consumerConfig`: `maxBytesPerPartition`, `maxBytes`, `minBytes`, `maxWaitTimeInMs`.)
   * @defaultValue `500`
   */
  batchSize?: number;
  /** Where lifecycle and delivery logs go (pino-compatible). @defaultValue silent, except errors with no `error` listener */
  logger?: InboxLogger;
  /** @internal Test hook: runs after a record's outcome is final (its effect committed) and before it is settled with the broker (dead-lettered, committed, or held). */
  beforeSettle?: (outcome: InboxOutcome) => void | Promise<void>;
}

/** Options of {@link createKafkaConsumer}. */
export interface KafkaConsumerOptions extends ConsumerOptions<KafkaDelivery, 'header'>, KafkaProcessingOptions {
  /** A kafkajs `Kafka` instance (or a KafkaJS-compatible client). Required. */
  kafka: KafkaLike;
  /** The consumer group. Required. */
  groupId: string;
  /** Topics (names or patterns) to subscribe to. Required. */
  topics: string | RegExp | (string | RegExp)[];
  /** How the message id of a record is found; see {@link KafkaProcessingOptions.messageId}. @defaultValue `{ header: 'message-id', fallback: false }` */
  messageId?: MessageIdOptions<KafkaDelivery, 'header'>;
  /** How values are decoded; see {@link KafkaProcessingOptions.payload}. @defaultValue `'json'` */
  payload?: PayloadMode;
  /**
   * How long `stop()` waits for records in flight to finish and commit; what is still running then
   * is abandoned uncommitted (`STOP_TIMEOUT`) and replayed later as duplicates.
   * @defaultValue `30000` (`DEFAULT_STOP_TIMEOUT_MS`)
   */
  stopTimeoutMs?: number;
  /** Where a group without committed offsets starts: `true` at the earliest record, so records produced before the first start are not skipped. @defaultValue `true` */
  fromBeginning?: boolean;
  /** Partitions processed at the same time (kafkajs `partitionsConsumedConcurrently`). Order is kept per partition. @defaultValue `1` */
  partitionsConsumedConcurrently?: number;
  /** Merged over `{ groupId }` and passed to `kafka.consumer()`: `sessionTimeout`, `heartbeatInterval`, `rebalanceTimeout`, fetch sizes, ... @defaultValue kafkajs' defaults */
  consumerConfig?: Partial<KafkaConsumerConfigLike>;
  /**
   * Produce dead-letters with an idempotent producer (kafkajs `idempotent: true`), so a send
   * retried after a lost acknowledgement is not written twice. With `false` dead-letters are still
   * produced with `acks: -1` and awaited before the commit, but a retried send may write a second copy.
   * @defaultValue `true`
   */
  idempotentDeadLetters?: boolean;
  /** Merged over `{ idempotent: idempotentDeadLetters, maxInFlightRequests: 1 }` for the dead-letter producer. @defaultValue `{}` */
  producerConfig?: KafkaProducerConfigLike;
  /** Your own connected dead-letter producer instead of one the consumer creates; `stop()` does not disconnect it. @defaultValue created from `kafka` */
  producer?: KafkaProducerLike;
  /**
   * kafkajs restarts a crashed consumer only for retriable errors; any other crash leaves it dead.
   * With `true` the adapter then starts a fresh consumer after a backoff (1 s doubling to 30 s;
   * `reconnect` once it rejoined), which resumes from the committed offsets. `false`: stay down
   * (the crash is still reported as `KAFKA_CONSUMER_CRASHED`).
   * @defaultValue `true`
   */
  restartOnCrash?: boolean;
}

/** The processing options with their defaults applied. */
export interface ProcessingSettings {
  mapping: MessageMapping;
  deadLetterTopic: DeadLetterTopicOption | undefined;
  retryBackoff: BackoffOptions;
  batchSize: number;
  beforeSettle: ((outcome: InboxOutcome) => void | Promise<void>) | undefined;
}

/** `retryBackoff` when not given. */
export const DEFAULT_RETRY_BACKOFF: BackoffOptions = { baseDelayMs: 1000, maxDelayMs: 30_000, jitter: 'full' };
/** `batchSize` when not given. */
export const DEFAULT_BATCH_SIZE = 500;

const invalid = (message: string): never => {
  throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, message);
};

/** Checks the processor and the processing options, and applies their defaults. Throws `INVALID_OPTIONS`. */
export function processingSettings(processor: AnyInboxProcessor, options: KafkaProcessingOptions): ProcessingSettings {
  if (typeof processor !== 'function' || (processor.kind !== 'single' && processor.kind !== 'batch')) {
    invalid('the handler must be a processor from withInbox() or withInboxBatch()');
  }
  const batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
  if (!Number.isInteger(batchSize) || batchSize < 1) invalid('options.batchSize must be an integer >= 1');
  const payload = options.payload ?? 'json';
  if (payload !== 'json' && payload !== 'content-type' && payload !== 'raw') invalid(`options.payload must be 'json', 'content-type' or 'raw'`);
  const messageId = options.messageId ?? {};
  if (messageId.header !== undefined && (typeof messageId.header !== 'string' || messageId.header === ''))
    invalid('options.messageId.header must be a non-empty string');
  if (messageId.extract !== undefined && typeof messageId.extract !== 'function') invalid('options.messageId.extract must be a function');
  return {
    mapping: { messageId, payload },
    deadLetterTopic: options.deadLetterTopic,
    retryBackoff: options.retryBackoff ?? DEFAULT_RETRY_BACKOFF,
    batchSize,
    beforeSettle: options.beforeSettle,
  };
}
