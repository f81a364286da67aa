import { ConsumerEventEmitter, type AnyInboxProcessor } from '@inboxed/core';
import { KafkaRuntime, type KafkaProcessingOptions } from './kafka-runtime.js';
import type { EachBatchPayloadLike, EachMessagePayloadLike, KafkaConsumerLike, KafkaProducerLike } from './kafka-types.js';

/** Options of {@link createEachMessageHandler} and {@link createEachBatchHandler}. */
export interface KafkaHandlerOptions extends KafkaProcessingOptions {
  /** The consumer whose `run()` gets the handler: used to commit, pause, seek and resume, and to follow rebalances. Must run with `autoCommit: false`. */
  consumer: KafkaConsumerLike;
  /** A connected producer for dead-letters; create it with `idempotent: true` so a retried send is not written twice. */
  producer: KafkaProducerLike;
  /** The consumer group id, written to the `x-inboxed-group-id` dead-letter header. */
  groupId?: string;
  /** Where events go. Default: a new emitter, reachable through the handler's `on()`. */
  events?: ConsumerEventEmitter;
}

/** Controls shared by both low-level handlers. */
export interface KafkaHandlerControls {
  /** Subscribes to `message_processed`, `duplicate`, `retry`, `dead_letter`, `error`, `reconnect`. Returns an unsubscribe function. */
  on: ConsumerEventEmitter['on'];
  /** Stops taking records and waits up to `stopTimeoutMs` for in-flight ones. Call before `consumer.stop()`; returns how many were abandoned. */
  drain(): Promise<number>;
  /** Detaches from the consumer's events and cancels pending resumes. Call after `consumer.stop()`. */
  close(): void;
}

/** An `eachMessage` implementation plus its controls. */
export type KafkaEachMessageHandler = ((payload: EachMessagePayloadLike) => Promise<void>) & KafkaHandlerControls;
/** An `eachBatch` implementation plus its controls. */
export type KafkaEachBatchHandler = ((payload: EachBatchPayloadLike) => Promise<void>) & KafkaHandlerControls;

function controls(runtime: KafkaRuntime): KafkaHandlerControls {
  return { on: runtime.on, drain: () => runtime.quiesce(), close: () => runtime.close() };
}

function runtimeFor(processor: AnyInboxProcessor, options: KafkaHandlerOptions): KafkaRuntime {
  const { consumer, producer, groupId, events, ...processing } = options;
  return new KafkaRuntime(
    { processor, consumer, producer, events: events ?? new ConsumerEventEmitter(), ...(groupId !== undefined ? { groupId } : {}) },
    processing,
  );
}

/**
 * Turns a processor into an `eachMessage` for your own `consumer.run({ autoCommit: false, eachMessage })`.
 * Each record's offset is committed once its outcome is final; a `retry` pauses the partition,
 * seeks back and resumes after `retryAfterMs`; dead-letters are produced (awaited) before the
 * commit. A batch processor is called with one message at a time.
 *
 * @example
 * const eachMessage = createEachMessageHandler(processor, { consumer, producer });
 * await consumer.run({ autoCommit: false, eachMessage });
 */
export function createEachMessageHandler(processor: AnyInboxProcessor, options: KafkaHandlerOptions): KafkaEachMessageHandler {
  const runtime = runtimeFor(processor, options);
  return Object.assign((payload: EachMessagePayloadLike) => runtime.eachMessage(payload), controls(runtime));
}

/**
 * Turns a processor into an `eachBatch` for your own
 * `consumer.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch })`. A kafkajs batch
 * is processed in chunks of `batchSize` (one processor call, so one database transaction, per
 * chunk with a batch processor), heartbeating between chunks and committing the prefix of final
 * outcomes after each.
 */
export function createEachBatchHandler(processor: AnyInboxProcessor, options: KafkaHandlerOptions): KafkaEachBatchHandler {
  const runtime = runtimeFor(processor, options);
  return Object.assign((payload: EachBatchPayloadLike) => runtime.eachBatch(payload), controls(runtime));
}
