import { backoffDelay, checkTablesAtStart, ConsumerEventEmitter, InboxError, InboxErrorCodes, type AnyInboxProcessor } from '@inboxed/core';
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
  /**
   * kafkajs restarts a crashed consumer only for retriable errors; any other crash leaves it dead.
   * With `true` (default) the adapter then starts a fresh consumer after a backoff (1 s doubling
   * to 30 s, emitting `reconnect`), which resumes from the committed offsets. `false`: stay down
   * (the crash is still reported as a `KAFKA_CONSUMER_CRASHED` error).
   */
  restartOnCrash?: boolean;
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
  const {
    kafka,
    groupId,
    topics,
    handler,
    mode,
    fromBeginning,
    partitionsConsumedConcurrently,
    consumerConfig,
    idempotentDeadLetters,
    producerConfig,
    producer: ownProducer,
    restartOnCrash,
    ...processing
  } = options;
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
  let restarts = 0;
  let restartTimer: NodeJS.Timeout | undefined;

  const disconnectConsumer = async (target: KafkaConsumerLike | undefined) => {
    await target
      ?.disconnect()
      .catch((error: unknown) => events.emit('error', kafkaError(KafkaErrorCodes.KAFKA_CONNECTION_FAILED, 'disconnecting the consumer failed', error)));
  };
  const disconnect = async () => {
    await disconnectConsumer(consumer);
    if (ownProducer === undefined) {
      await producer
        ?.disconnect()
        .catch((error: unknown) =>
          events.emit('error', kafkaError(KafkaErrorCodes.KAFKA_CONNECTION_FAILED, 'disconnecting the dead-letter producer failed', error)),
        );
    }
  };

  /** A fresh kafkajs consumer and runtime, subscribed and running. */
  const launch = async () => {
    const current = kafka.consumer({ ...consumerConfig, groupId });
    consumer = current;
    const run = new KafkaRuntime(
      { processor: handler, consumer: current, producer: producer!, events, groupId, onFatalCrash: () => scheduleRestart(run) },
      processing,
    );
    runtime = run;
    try {
      await current.connect();
      await current.subscribe({ topics: topicList, fromBeginning: fromBeginning ?? true });
      await current.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: partitionsConsumedConcurrently ?? 1,
        ...(runMode === 'batch' ? { eachBatch: run.eachBatch } : { eachMessage: run.eachMessage }),
      });
    } catch (error) {
      run.close();
      await disconnectConsumer(current);
      throw kafkaError(KafkaErrorCodes.KAFKA_CONNECTION_FAILED, `starting the Kafka consumer for group ${groupId} failed`, error, {
        details: { groupId, topics: topicList.map(String) },
      });
    }
  };

  /** After a crash kafkajs will not recover from: a new consumer resumes from the committed offsets. */
  const scheduleRestart = (crashed: KafkaRuntime) => {
    crashed.close();
    // A crash can happen inside start() too (kafkajs joins the group within run()).
    if (restartOnCrash === false || state === 'stopped' || state === 'idle' || crashed !== runtime) return;
    const delayMs = backoffDelay(++restarts, { baseDelayMs: 1000, maxDelayMs: 30_000, jitter: 'equal' });
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      if (state === 'stopped') return;
      events.emit('reconnect', { attempt: restarts, delayMs });
      launch().then(
        () => {
          restarts = 0;
        },
        (error: unknown) => {
          events.emit('error', error as InboxError);
          scheduleRestart(runtime!);
        },
      );
    }, delayMs);
  };

  return {
    on: (event, listener) => events.on(event, listener),
    async start() {
      if (state !== 'idle') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `start() called on a ${state} consumer`);
      state = 'starting';
      try {
        await checkTablesAtStart(handler, events);
      } catch (error) {
        state = 'stopped';
        throw error;
      }
      producer = ownProducer ?? kafka.producer({ idempotent: idempotentDeadLetters ?? true, maxInFlightRequests: 1, ...producerConfig });
      try {
        if (ownProducer === undefined) await producer.connect();
      } catch (error) {
        state = 'stopped';
        await disconnect();
        throw kafkaError(KafkaErrorCodes.KAFKA_CONNECTION_FAILED, 'connecting the dead-letter producer failed', error, { details: { groupId } });
      }
      try {
        await launch();
      } catch (error) {
        state = 'stopped';
        await disconnect();
        throw error;
      }
      state = 'running';
    },
    async stop() {
      if (state === 'idle' || state === 'stopped') {
        state = 'stopped';
        return;
      }
      state = 'stopped';
      clearTimeout(restartTimer);
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
