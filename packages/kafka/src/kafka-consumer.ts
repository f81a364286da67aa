import { ConsumerEventEmitter, InboxError, InboxErrorCodes, type AnyInboxProcessor } from '@inboxed/core';
import { KafkaErrorCodes, kafkaError } from './kafka-errors.js';
import { KafkaRuntime, type KafkaProcessingOptions } from './kafka-runtime.js';
import type { KafkaConsumerConfigLike, KafkaConsumerLike, KafkaLike, KafkaProducerConfigLike, KafkaProducerLike } from './kafka-types.js';

/** Options of {@link createKafkaConsumer}. */
export interface KafkaConsumerOptions extends KafkaProcessingOptions {
  /** A kafkajs `Kafka` instance (or a KafkaJS-compatible client). */
  kafka: KafkaLike;
  /** The consumer group. */
  groupId: string;
  /** Topics (names or patterns) to subscribe to. */
  topics: string | RegExp | (string | RegExp)[];
  /** A processor from `withInbox` (per message) or `withInboxBatch` (per chunk). */
  handler: AnyInboxProcessor;
  /**
   * `'message'`: kafkajs `eachMessage`, one commit per record. `'batch'`: kafkajs `eachBatch`,
   * one processor call and one commit per chunk of `batchSize`. Default: `'batch'` for a
   * `withInboxBatch` processor, `'message'` otherwise.
   */
  mode?: 'message' | 'batch';
  /** Where a group without committed offsets starts. Default `true` (earliest), so records produced before the first start are not skipped. */
  fromBeginning?: boolean;
  /** Partitions processed at the same time (kafkajs `partitionsConsumedConcurrently`). Order is kept per partition. Default 1. */
  partitionsConsumedConcurrently?: number;
  /** Merged over `{ groupId }` and passed to `kafka.consumer()` (session timeout, heartbeat interval, max wait, ...). */
  consumerConfig?: Partial<KafkaConsumerConfigLike>;
  /**
   * Produce dead-letters with an idempotent producer (kafkajs `idempotent: true`), so a send
   * retried after a lost ack is not written twice. Default `true`. Brokers without
   * InitProducerId support through the controller (librdkafka's mock cluster reports controller
   * id 0, which kafkajs cannot find) need `false`: dead-letters are then still produced with
   * `acks: -1` and awaited, but a retried send may write a second copy.
   */
  idempotentDeadLetters?: boolean;
  /** Merged over `{ idempotent, maxInFlightRequests: 1 }` for the dead-letter producer. */
  producerConfig?: KafkaProducerConfigLike;
  /** Bring your own connected dead-letter producer instead; it is not disconnected by `stop()`. */
  producer?: KafkaProducerLike;
}

/** A running (or startable) Kafka inbox consumer. */
export interface KafkaInboxConsumer {
  /** Connects, subscribes and starts consuming. Throws `KAFKA_CONNECTION_FAILED` when that fails. */
  start(): Promise<void>;
  /**
   * Stops taking records, lets in-flight chunks finish (up to `stopTimeoutMs`; unfinished work is
   * abandoned uncommitted and replays later as duplicates, and the disconnect then completes in the
   * background once the hung handler returns), stops the kafkajs consumer and disconnects. Safe to
   * call twice.
   */
  stop(): Promise<void>;
  /** Subscribes to `message_processed`, `duplicate`, `retry`, `dead_letter`, `error`, `reconnect`. Returns an unsubscribe function. */
  on: ConsumerEventEmitter['on'];
}

const asList = <T>(value: T | T[]): T[] => (Array.isArray(value) ? value : [value]);

/**
 * A kafkajs consumer group member whose handler effects commit exactly once per message id, with
 * auto-commit off: an offset is committed only after the record's outcome is final (processed,
 * duplicate, rejected, or dead-lettered with an acked dead-letter record). A `retry` holds its
 * partition at the failing offset (paused, seeked back, resumed after the backoff) while other
 * partitions keep flowing; work for partitions revoked by a rebalance never commits.
 *
 * @example
 * const consumer = createKafkaConsumer({ kafka, groupId: 'billing', topics: ['payments'], handler: processor });
 * consumer.on('dead_letter', (outcome, topic) => log.warn({ outcome, topic }));
 * await consumer.start();
 */
export function createKafkaConsumer(options: KafkaConsumerOptions): KafkaInboxConsumer {
  const { kafka, groupId, topics, handler, mode, fromBeginning, partitionsConsumedConcurrently, consumerConfig, idempotentDeadLetters, producerConfig, producer: ownProducer, ...processing } = options;
  if (typeof groupId !== 'string' || groupId === '') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.groupId must be a non-empty string');
  if (typeof handler !== 'function' || (handler.kind !== 'single' && handler.kind !== 'batch')) {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.handler must be a processor from withInbox() or withInboxBatch()');
  }
  const topicList = asList(topics);
  if (topicList.length === 0) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.topics must name at least one topic');
  const runMode = mode ?? (handler.kind === 'batch' ? 'batch' : 'message');
  const events = new ConsumerEventEmitter();
  let state: 'idle' | 'starting' | 'running' | 'stopped' = 'idle';
  let consumer: KafkaConsumerLike | undefined;
  let producer: KafkaProducerLike | undefined;
  let runtime: KafkaRuntime | undefined;

  const disconnect = async () => {
    await consumer?.disconnect().catch((error: unknown) => events.emit('error', kafkaError(KafkaErrorCodes.KAFKA_CONNECTION_FAILED, 'disconnecting the consumer failed', error)));
    if (ownProducer === undefined) {
      await producer?.disconnect().catch((error: unknown) => events.emit('error', kafkaError(KafkaErrorCodes.KAFKA_CONNECTION_FAILED, 'disconnecting the dead-letter producer failed', error)));
    }
  };

  return {
    on: (event, listener) => events.on(event, listener),
    async start() {
      if (state !== 'idle') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `start() called on a ${state} consumer`);
      state = 'starting';
      consumer = kafka.consumer({ ...consumerConfig, groupId });
      producer = ownProducer ?? kafka.producer({ idempotent: idempotentDeadLetters ?? true, maxInFlightRequests: 1, ...producerConfig });
      runtime = new KafkaRuntime({ processor: handler, consumer, producer, events, groupId }, processing);
      try {
        if (ownProducer === undefined) await producer.connect();
        await consumer.connect();
        await consumer.subscribe({ topics: topicList, fromBeginning: fromBeginning ?? true });
        const run = runtime;
        await consumer.run({
          autoCommit: false,
          eachBatchAutoResolve: false,
          partitionsConsumedConcurrently: partitionsConsumedConcurrently ?? 1,
          ...(runMode === 'batch' ? { eachBatch: run.eachBatch } : { eachMessage: run.eachMessage }),
        });
      } catch (error) {
        state = 'stopped';
        runtime.close();
        await disconnect();
        throw kafkaError(KafkaErrorCodes.KAFKA_CONNECTION_FAILED, `starting the Kafka consumer for group ${groupId} failed`, error, { details: { groupId, topics: topicList.map(String) } });
      }
      state = 'running';
    },
    async stop() {
      if (state === 'idle' || state === 'stopped') {
        state = 'stopped';
        return;
      }
      state = 'stopped';
      const left = (await runtime?.quiesce()) ?? 0;
      runtime?.close();
      if (left === 0) {
        // Our handlers return at the next chunk boundary once stopping, so this is quick.
        await consumer?.stop().catch(() => undefined);
        await disconnect();
        return;
      }
      // A handler hung past stopTimeoutMs. kafkajs' stop() and disconnect() wait for it, so let
      // them finish in the background: the connection closes once the handler returns, and
      // nothing it did gets committed (the runtime is closed).
      void disconnect();
    },
  };
}
