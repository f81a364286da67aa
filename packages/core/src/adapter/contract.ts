import type { AnyInboxProcessor, InboxOutcome } from '../types.js';
import type { ConsumerEvents } from './events.js';
import type { InboxLogger } from './logger.js';
import type { PayloadMode } from './payload.js';
import type { RedeliveryHorizon, RetentionGuardOptions } from './retention-guard.js';

/**
 * Where a broker consumer is in its one lifecycle, the same for every adapter:
 * `idle` -> `starting` -> `running` (<-> `reconnecting` while its connection is re-established) ->
 * `stopping` -> `stopped`. A stopped consumer can be started again.
 */
export type ConsumerState = 'idle' | 'starting' | 'running' | 'reconnecting' | 'stopping' | 'stopped';

/** What a readiness or liveness probe needs to know about a consumer. */
export interface ConsumerStatus {
  state: ConsumerState;
  /** Connected to the broker right now. */
  connected: boolean;
  /** Taking new deliveries (subscribed and not stopping). Ready = `consuming`. */
  consuming: boolean;
  /** Deliveries being processed or settled now. */
  inFlight: number;
  /** When a delivery was last settled with the broker (acked, committed, deleted, dead-lettered). */
  lastSettledAt?: Date;
  /** The last `error` event. Live = not stuck: `lastSettledAt` moves, or nothing is in flight. */
  lastError?: { code: string; message: string; at: Date };
}

/** Every broker consumer (`createAmqpConsumer`, `createKafkaConsumer`, `createSqsConsumer`). */
export interface InboxConsumer {
  /** Checks the inbox tables, connects and starts consuming. Starting a running consumer does nothing. */
  start(): Promise<void>;
  /**
   * Stops taking deliveries, lets those in flight finish (their handlers see `context.signal` fire),
   * up to `stopTimeoutMs` (then `STOP_TIMEOUT`: what did not finish is redelivered), and disconnects.
   * Safe to call twice; a stopped consumer can be started again.
   */
  stop(): Promise<void>;
  /** State for health probes; see {@link ConsumerStatus}. */
  status(): ConsumerStatus;
  /** Subscribes to an event (see {@link ConsumerEvents}); returns the function that unsubscribes. */
  on<K extends keyof ConsumerEvents>(event: K, listener: (...args: ConsumerEvents[K]) => void): () => void;
  /**
   * Asks the broker how long it may still redeliver a message (Kafka `retention.ms` and
   * `segment.ms` per topic, SQS `MessageRetentionPeriod`, RabbitMQ the TTL of the queue the
   * consumer declares): what `start()` compares `inboxRetentionMs` with (unless
   * `redeliveryHorizonMs` is given). Never rejects: what cannot be read is `kind: 'unknown'`.
   */
  redeliveryHorizon(): Promise<RedeliveryHorizon[]>;
}

/**
 * How a consumer finds a delivery's message id, tried in this order: `extract(delivery)`, the
 * header (AMQP, Kafka) or message attribute (SQS) named by `TKey`, the broker's own message id
 * field where the protocol has one for it (AMQP `properties.messageId`, an SQS FIFO deduplication
 * id), then, only with `fallback: true`, an id the broker assigns per message (Kafka
 * `topic/partition/offset`, SQS `MessageId`), which survives redelivery but not a producer's retry.
 * A delivery without an id is dead-lettered (`missing-message-id`).
 */
export type MessageIdOptions<TDelivery, TKey extends 'header' | 'attribute' = 'header'> = {
  [K in TKey]?: string;
} & {
  extract?: (delivery: TDelivery) => string | undefined;
  fallback?: boolean;
};

/**
 * Options every broker consumer takes, with the same names and defaults; the retention guard's
 * (`inboxRetentionMs`, `strictRetention`, `redeliveryHorizonMs`) are in {@link RetentionGuardOptions}.
 */
export interface ConsumerOptions<TDelivery, TKey extends 'header' | 'attribute' = 'header'> extends RetentionGuardOptions {
  /** A processor from `withInbox` (one transaction per message) or `withInboxBatch` (one per batch). */
  handler: AnyInboxProcessor;
  /** How long `stop()` waits for deliveries in flight, in ms. @defaultValue 30000 */
  stopTimeoutMs?: number;
  /** How to find a delivery's message id. @defaultValue header/attribute `message-id`, no fallback (per adapter: see its README) */
  messageId?: MessageIdOptions<TDelivery, TKey>;
  /** How bodies are decoded: `'json'`, `'content-type'` (JSON when it says so, else bytes) or `'raw'` bytes. @defaultValue per adapter */
  payload?: PayloadMode;
  /** Where lifecycle and delivery logs go (pino-compatible). @defaultValue silent, except errors with no `error` listener */
  logger?: InboxLogger;
  /** Test hook (for crash tests such as a SIGKILL between commit and settle): runs after a delivery's outcome is final (its effect committed) and before it is settled with the broker. */
  beforeSettle?: (outcome: InboxOutcome) => void | Promise<void>;
}

/** `stopTimeoutMs` when not given, the same for every consumer. */
export const DEFAULT_STOP_TIMEOUT_MS = 30_000;
