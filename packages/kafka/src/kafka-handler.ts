import { InboxError, InboxErrorCodes, type AnyInboxProcessor } from '@inboxed/core';
import { ConsumerEventEmitter, DEFAULT_STOP_TIMEOUT_MS, defaultLogger, InFlight, type InboxConsumer } from '@inboxed/core/adapter';
import { attachRuntime, type KafkaRuntime } from './kafka-batch.js';
import { processingSettings, type KafkaProcessingOptions } from './kafka-options.js';
import type { EachBatchPayloadLike, EachMessagePayloadLike, KafkaConsumerLike, KafkaProducerLike } from './kafka-types.js';

/** Options of {@link createEachBatchHandler} and {@link createEachMessageHandler}. */
export interface KafkaHandlerOptions extends KafkaProcessingOptions {
  /** The consumer whose `run()` gets the handler: used to commit, pause, seek and resume, and to follow the group. Must run with `autoCommit: false`. Required. */
  consumer: KafkaConsumerLike;
  /** A connected producer for dead-letters; create it with `idempotent: true` so a retried send is not written twice. Required. */
  producer: KafkaProducerLike;
  /** The consumer group id, written to the `x-inboxed-group-id` dead-letter header. @defaultValue none (no header) */
  groupId?: string;
  /** How long `drain()` waits for records in flight. @defaultValue `30000` */
  stopTimeoutMs?: number;
}

/** Controls shared by both low-level handlers. */
export interface KafkaHandlerControls {
  /** Subscribes to the consumer events (`message_processed`, `duplicate`, `retry`, `busy`, `dead_letter`, `error`); returns the function that unsubscribes. */
  on: InboxConsumer['on'];
  /**
   * Stops taking records (handlers in flight see their signal fire) and waits up to
   * `stopTimeoutMs` for those in flight; call it before `consumer.stop()`. Resolves with how many
   * were still running (then also reported as a `STOP_TIMEOUT` error); they never commit.
   */
  drain(): Promise<number>;
  /** Detaches from the consumer's events and cancels pending resumes. Call after `consumer.stop()`. */
  close(): void;
}

/** An `eachMessage` implementation plus its controls. */
export type KafkaEachMessageHandler = ((payload: EachMessagePayloadLike) => Promise<void>) & KafkaHandlerControls;
/** An `eachBatch` implementation plus its controls. */
export type KafkaEachBatchHandler = ((payload: EachBatchPayloadLike) => Promise<void>) & KafkaHandlerControls;

function handlerRuntime(processor: AnyInboxProcessor, options: KafkaHandlerOptions): { runtime: KafkaRuntime; controls: KafkaHandlerControls } {
  const settings = processingSettings(processor, options);
  const stopTimeoutMs = options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS;
  const events = new ConsumerEventEmitter(options.logger ?? defaultLogger);
  const inFlight = new InFlight();
  const stopping = new AbortController();
  const runtime = attachRuntime({
    processor,
    consumer: options.consumer,
    producer: options.producer,
    events,
    settings,
    groupId: options.groupId,
    inFlight,
    taking: () => !stopping.signal.aborted,
    signal: () => stopping.signal,
  });
  const controls: KafkaHandlerControls = {
    on: (event, listener) => events.on(event, listener),
    async drain() {
      stopping.abort();
      runtime.holds.cancelAll();
      const left = await inFlight.drain(stopTimeoutMs);
      if (left > 0) {
        runtime.close();
        events.emit(
          'error',
          new InboxError(
            InboxErrorCodes.STOP_TIMEOUT,
            `${left} batch(es) still in flight after stopTimeoutMs (${stopTimeoutMs} ms); abandoned without committing`,
            {
              details: { inFlight: left, stopTimeoutMs },
            },
          ),
        );
      }
      return left;
    },
    close: () => runtime.close(),
  };
  return { runtime, controls };
}

/**
 * Turns a processor into an `eachBatch` for your own
 * `consumer.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch })`: records are
 * processed in offset order (one per call of a per-message processor, up to `batchSize` per call
 * of a batch processor), each call settled (dead-letters produced and acknowledged, then the
 * offset committed) before the next; a `retry` or `busy` pauses the partition, seeks back and resumes
 * after `retryAfterMs`. When the group refuses a commit, the rest of the batch is dropped at once and the
 * refusal thrown, so kafkajs rejoins.
 *
 * @example
 * const eachBatch = createEachBatchHandler(processor, { consumer, producer, groupId: 'ledger' });
 * await consumer.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch });
 */
export function createEachBatchHandler(processor: AnyInboxProcessor, options: KafkaHandlerOptions): KafkaEachBatchHandler {
  const { runtime, controls } = handlerRuntime(processor, options);
  return Object.assign(
    ({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayloadLike) =>
      runtime.run({ topic: batch.topic, partition: batch.partition, messages: batch.messages, resolveOffset, heartbeat, isRunning, isStale }),
    controls,
  );
}

/**
 * Turns a processor into an `eachMessage` for your own `consumer.run({ autoCommit: false, eachMessage })`.
 * Each record's offset is committed once its outcome is final; a `retry` or `busy` pauses the
 * partition, seeks back and resumes after `retryAfterMs`; dead-letters are produced (awaited) before the
 * commit. A batch processor is called with one message at a time. Prefer
 * {@link createEachBatchHandler}: kafkajs hands `eachMessage` the records of a fetch one by one,
 * so after a refused commit the remaining ones are only dropped by throwing the refusal at kafkajs.
 */
export function createEachMessageHandler(processor: AnyInboxProcessor, options: KafkaHandlerOptions): KafkaEachMessageHandler {
  const { runtime, controls } = handlerRuntime(processor, options);
  return Object.assign(
    ({ topic, partition, message, heartbeat }: EachMessagePayloadLike) => runtime.run({ topic, partition, messages: [message], heartbeat }),
    controls,
  );
}
