import { InboxError, InboxErrorCodes, type AnyInboxProcessor, type BackoffOptions } from '@inboxed/core';
import { type ConsumerOptions, DEFAULT_STOP_TIMEOUT_MS, validateRetentionOptions } from '@inboxed/core/adapter';
import type { Channel, ConfirmChannel, ConsumeMessage, Options } from 'amqplib';
import type { DeadLetterTarget } from './amqp-topology.js';

/**
 * A connection the caller owns: what the consumer uses of it. A plain amqplib connection
 * (`ChannelModel`) and amqplib's recovering one both fit, with any amqplib version's types.
 */
export interface AmqpConnection {
  createChannel(): Promise<Channel>;
  createConfirmChannel(): Promise<ConfirmChannel>;
  close(): Promise<void>;
  on(event: 'close' | 'error', listener: (error?: unknown) => void): unknown;
  off(event: 'close' | 'error', listener: (error?: unknown) => void): unknown;
}

/**
 * Options of {@link createAmqpConsumer}: the options every inboxed consumer takes (`handler`,
 * `stopTimeoutMs`, `messageId`, `payload`, `logger`) plus RabbitMQ's own. Give `url` (the consumer
 * owns, reconnects and closes its connection) or `connection`.
 */
export interface AmqpConsumerOptions extends ConsumerOptions<ConsumeMessage, 'header'> {
  /** Broker URL or amqplib connect options, e.g. `amqp://guest:guest@localhost:5672`. The consumer opens, reconnects and closes this connection. @defaultValue none (give `url` or `connection`) */
  url?: string | Options.Connect;
  /** amqplib socket options for `url` (TLS, timeouts; heartbeats go in the URL: `?heartbeat=30`). @defaultValue none */
  socketOptions?: Record<string, unknown>;
  /**
   * A connection you own (e.g. amqplib's recovering connection). The consumer opens its channels on
   * it, re-opens them with backoff when they close, and never closes the connection itself.
   * @defaultValue none (give `url` or `connection`)
   */
  connection?: AmqpConnection;
  /** Connection name shown in the RabbitMQ management UI and `rabbitmqctl list_connections`. @defaultValue `inboxed:<consumer>:<queue>` */
  connectionName?: string;
  /** The work queue to consume. @defaultValue none (required) */
  queue: string;
  /** Assert the work queue with these options (e.g. `{ durable: true }`) instead of only checking that it exists. @defaultValue only checked */
  queueOptions?: Options.AssertQueue;
  /** Declare the retry queues and the dead-letter queue on every (re)connect. @defaultValue true */
  assertTopology?: boolean;
  /** Unacked deliveries the broker hands this consumer at once (`basic.qos`). @defaultValue 32; with a batch processor `4 * batchSize` */
  prefetch?: number;
  /** Batch mode only: the most deliveries handed to the batch processor in one call (one transaction). @defaultValue 100 */
  batchSize?: number;
  /** Batch mode only: longest wait after a batch's first delivery before a partial batch is processed, in ms. @defaultValue 50 */
  batchWaitMs?: number;
  /**
   * Delays of the retry queues (`<queue>.retry.<ms>`), in ms. A `retry` or `busy` outcome goes to the smallest
   * delay >= its `retryAfterMs` (the largest when none is).
   * @defaultValue `[1000, 5000, 30000, 120000, 600000]`
   */
  retryDelaysMs?: readonly number[];
  /** Where `dead-letter` and `conflict` outcomes go. @defaultValue `{ queue: '<queue>.dead-letter' }` */
  deadLetter?: DeadLetterTarget;
  /** Pause before requeueing a delivery whose retry/dead-letter copy could not be published, in ms. @defaultValue 1000 */
  requeueDelayMs?: number;
  /** Backoff between reconnect attempts. @defaultValue `{ baseDelayMs: 200, maxDelayMs: 30000, jitter: 'equal' }` */
  reconnect?: BackoffOptions;
}

function invalid(message: string): never {
  throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, message);
}

/** @internal A processor from `withInbox` or `withInboxBatch`, or `INVALID_OPTIONS`. */
export function validateProcessor(processor: AnyInboxProcessor): void {
  if (typeof processor !== 'function' || (processor.kind !== 'single' && processor.kind !== 'batch')) {
    invalid('options.handler must be a processor from withInbox() or withInboxBatch()');
  }
}

/** @internal `batchSize` and `batchWaitMs` with their defaults, validated. */
export function resolveBatch(options: { batchSize?: number; batchWaitMs?: number }): { batchSize: number; batchWaitMs: number } {
  const batchSize = options.batchSize ?? 100;
  const batchWaitMs = options.batchWaitMs ?? 50;
  if (!Number.isInteger(batchSize) || batchSize < 1) invalid('options.batchSize must be an integer >= 1');
  if (!Number.isInteger(batchWaitMs) || batchWaitMs < 0) invalid('options.batchWaitMs must be an integer >= 0 (milliseconds)');
  return { batchSize, batchWaitMs };
}

/** @internal `requeueDelayMs` with its default, validated. */
export function resolveRequeueDelay(requeueDelayMs: number | undefined): number {
  const delay = requeueDelayMs ?? 1000;
  if (!Number.isInteger(delay) || delay < 0) invalid('options.requeueDelayMs must be an integer >= 0 (milliseconds)');
  return delay;
}

/** @internal The consumer-level options, with defaults, validated at construction. */
export interface ResolvedConsumerOptions {
  prefetch: number;
  batchSize: number;
  batchWaitMs: number;
  stopTimeoutMs: number;
  requeueDelayMs: number;
  reconnect: BackoffOptions;
}

/** @internal Validates what `createAmqpConsumer` is given; throws `INVALID_OPTIONS` at construction. */
export function resolveConsumerOptions(options: AmqpConsumerOptions): ResolvedConsumerOptions {
  if (options === null || typeof options !== 'object') invalid('options are required');
  if ((options.url === undefined) === (options.connection === undefined)) invalid('pass exactly one of options.url and options.connection');
  validateProcessor(options.handler);
  validateRetentionOptions(options);
  const { batchSize, batchWaitMs } = resolveBatch(options);
  // Batch mode: room for ~4 batches in flight, so one fills while others commit.
  const prefetch = options.prefetch ?? (options.handler.kind === 'batch' ? 4 * batchSize : 32);
  if (!Number.isInteger(prefetch) || prefetch < 1 || prefetch > 65_535) invalid('options.prefetch must be an integer from 1 to 65535');
  const stopTimeoutMs = options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS;
  if (!Number.isInteger(stopTimeoutMs) || stopTimeoutMs < 0) invalid('options.stopTimeoutMs must be an integer >= 0 (milliseconds)');
  return {
    prefetch,
    batchSize,
    batchWaitMs,
    stopTimeoutMs,
    requeueDelayMs: resolveRequeueDelay(options.requeueDelayMs),
    reconnect: { baseDelayMs: 200, maxDelayMs: 30_000, jitter: 'equal', ...options.reconnect },
  };
}
