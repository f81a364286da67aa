import {
  backoffDelay,
  checkTablesAtStart,
  ConsumerEventEmitter,
  describeError,
  InboxError,
  InboxErrorCodes,
  InFlight,
  type AnyInboxProcessor,
  type BackoffOptions,
  type InboxOutcome,
} from '@inboxed/core';
import amqp, { type Channel, type ChannelModel, type ConfirmChannel, type ConsumeMessage, type Options } from 'amqplib';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import { createAmqpMessageHandler, type AmqpBatchOptions, type AmqpMessageHandler } from './amqp-message-handler.js';
import type { MessageIdExtractor, PayloadMode } from './amqp-message.js';
import { assertTopology, resolveTopology, type DeadLetterTarget } from './amqp-topology.js';

/** Options of {@link createAmqpConsumer}. Give `url` (the consumer owns and reconnects its connection) or `connection`. */
export interface AmqpConsumerOptions {
  /** Broker URL or connect options, e.g. `amqp://guest:guest@localhost:5672`. The consumer opens, reconnects and closes this connection. */
  url?: string | Options.Connect;
  /** Socket options for `url` (TLS, heartbeat via URL `?heartbeat=`, ...). */
  socketOptions?: Record<string, unknown>;
  /**
   * A connection you own (e.g. amqplib's recovering connection). The consumer opens its channels on
   * it, re-opens them with backoff when they close, and never closes the connection itself.
   */
  connection?: ChannelModel;
  /** The work queue to consume. */
  queue: string;
  /** A processor from `withInbox` (one transaction per message) or `withInboxBatch` (one per batch). */
  handler: AnyInboxProcessor;
  /** Unacked deliveries in flight (`basic.qos`). Default 32; in batch mode `4 * batch.size`. */
  prefetch?: number;
  /** Id extractor tried after `properties.messageId`, header `x-message-id` and header `message-id`. */
  messageId?: MessageIdExtractor;
  /** Body decoding: `'content-type'` (default: JSON when the content type says so, else a Buffer), `'json'` or `'raw'`. */
  payload?: PayloadMode;
  /**
   * Delays of the retry queues (`<queue>.retry.<ms>`), in ms. A `retry` outcome goes to the smallest
   * delay >= its `retryAfterMs` (the largest when none is). Default `[1000, 5000, 30000, 120000, 600000]`.
   */
  retryDelaysMs?: readonly number[];
  /** Where `dead-letter` and `conflict` outcomes go. Default `{ queue: '<queue>.dead-letter' }`. */
  deadLetter?: DeadLetterTarget;
  /** Declare the retry queues and the dead-letter queue on every (re)connect. Default `true`. */
  assertTopology?: boolean;
  /** Assert the work queue with these options (e.g. `{ durable: true }`). Default: only check that it exists. */
  queueOptions?: Options.AssertQueue;
  /** Batch collection, used when `handler` comes from `withInboxBatch`. Default `{ size: 100, waitMs: 50 }`. */
  batch?: AmqpBatchOptions;
  /** How long `stop()` waits for in-flight handlers before closing anyway, in ms. Default 10000. */
  stopTimeoutMs?: number;
  /** Backoff between reconnect attempts. Default 200 ms doubling to 30 s, equal jitter. */
  reconnect?: BackoffOptions;
  /** Pause before requeueing a delivery whose retry/dead-letter copy could not be published. Default 1000 ms. */
  requeueDelayMs?: number;
  /** Connection name shown in the RabbitMQ management UI. Default `inboxed:<consumer>:<queue>`. */
  connectionName?: string;
  /** @internal test hook: runs after the outcome is final (committed) and before the ack. */
  beforeAck?: (outcome: InboxOutcome, delivery: ConsumeMessage) => void | Promise<void>;
}

/** Lifecycle of an {@link AmqpConsumer}. */
export type AmqpConsumerStatus = 'idle' | 'starting' | 'running' | 'reconnecting' | 'stopping' | 'stopped';

/** A running RabbitMQ consumer. */
export interface AmqpConsumer {
  /** Connects, asserts the topology and starts consuming. Rejects (`AMQP_CONNECT_FAILED`, `AMQP_TOPOLOGY_FAILED`) when the first attempt fails. */
  start(): Promise<void>;
  /** Cancels the consumer, waits for in-flight deliveries (up to `stopTimeoutMs`), then closes. */
  stop(): Promise<void>;
  /** Subscribes to `message_processed`, `duplicate`, `retry`, `dead_letter`, `error`, `reconnect`. Returns an unsubscribe function. */
  on: ConsumerEventEmitter['on'];
  /** Where the consumer is in its lifecycle. */
  readonly status: AmqpConsumerStatus;
}

interface Session {
  connection: ChannelModel;
  consumeChannel: Channel;
  publishChannel: ConfirmChannel;
  consumerTag: string;
  handler: AmqpMessageHandler;
  /** Resolves with the reason when the connection or one of the channels goes away. */
  lost: Promise<unknown>;
  detach: () => void;
}

async function quietly(task: () => Promise<unknown> | unknown): Promise<void> {
  try {
    await task();
  } catch {
    // Closing something that is already closed: nothing to report.
  }
}

/**
 * A RabbitMQ consumer with exactly-once database effects. Each delivery is handed to your inboxed
 * processor and acked only once its outcome is final (committed, duplicate or rejected); retries
 * wait in per-delay retry queues instead of hot-looping; poison messages and payload conflicts go
 * to the dead-letter queue with reason headers; the connection is re-established with backoff.
 *
 * ```ts
 * const consumer = createAmqpConsumer({
 *   url: 'amqp://localhost',
 *   queue: 'orders',
 *   handler: withInbox(async (message, tx) => { await tx.insert(orders).values(...) }, { db, consumer: 'billing.orders' }),
 * });
 * consumer.on('error', (error) => log.error(error));
 * await consumer.start();
 * process.on('SIGTERM', () => void consumer.stop());
 * ```
 */
export function createAmqpConsumer(options: AmqpConsumerOptions): AmqpConsumer {
  if (options === null || typeof options !== 'object') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options are required');
  if ((options.url === undefined) === (options.connection === undefined)) {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'pass exactly one of options.url and options.connection');
  }
  const processor = options.handler;
  if (typeof processor !== 'function' || (processor.kind !== 'single' && processor.kind !== 'batch')) {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.handler must be a processor from withInbox() or withInboxBatch()');
  }
  const topology = resolveTopology(options.queue, options.retryDelaysMs, options.deadLetter);
  const batchSize = options.batch?.size ?? 100;
  // Batch mode: room for ~4 batches in flight, so one fills while others commit (PG does better with a few concurrent transactions).
  const prefetch = options.prefetch ?? (processor.kind === 'batch' ? 4 * batchSize : 32);
  if (!Number.isInteger(prefetch) || prefetch < 1) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.prefetch must be an integer >= 1');
  const stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
  const reconnect: BackoffOptions = { baseDelayMs: 200, maxDelayMs: 30_000, jitter: 'equal', ...options.reconnect };
  const connectionName = options.connectionName ?? `inboxed:${processor.consumer}:${topology.queue}`;

  const events = new ConsumerEventEmitter();
  const inFlight = new InFlight();
  let status: AmqpConsumerStatus = 'idle';
  let current: Session | undefined;
  let loop: Promise<void> | undefined;
  let wakeUp: (() => void) | undefined;
  let stopping = false;

  async function openSession(): Promise<Session> {
    const owned = options.connection === undefined;
    const connection: ChannelModel =
      options.connection ?? (await amqp.connect(options.url as string, { ...options.socketOptions, clientProperties: { connection_name: connectionName } }));
    let markLost!: (reason: unknown) => void;
    const lost = new Promise<unknown>((resolve) => (markLost = resolve));
    // amqplib emits 'error' before 'close'; without a listener an 'error' would crash the process.
    const onError = () => {};
    const onClose = (error?: unknown) => markLost(error ?? new Error('connection closed'));
    connection.on('error', onError);
    connection.on('close', onClose);
    const channels: Channel[] = [];
    const detach = () => {
      connection.off('error', onError);
      connection.off('close', onClose);
    };
    try {
      const openChannel = async <C extends Channel>(create: () => Promise<C>, name: string): Promise<C> => {
        const channel = await create();
        channels.push(channel);
        let failure: unknown;
        channel.on('error', (error: unknown) => (failure = error));
        channel.on('close', () => markLost(failure ?? new Error(`${name} channel closed`)));
        return channel;
      };
      if (options.assertTopology !== false) {
        // A failed check closes its channel, so the topology gets a channel of its own.
        const setup = await connection.createChannel();
        setup.on('error', () => {});
        try {
          await assertTopology(setup, topology, options.queueOptions);
        } catch (error) {
          throw toAmqpError(AmqpErrorCodes.TOPOLOGY_FAILED, `could not assert the topology of ${topology.queue}`, error, {
            details: { queue: topology.queue },
          });
        }
        await quietly(() => setup.close());
      }
      const consumeChannel = await openChannel(() => connection.createChannel(), 'consume');
      const publishChannel = await openChannel(() => connection.createConfirmChannel(), 'publish');
      await consumeChannel.prefetch(prefetch);
      const handler = createAmqpMessageHandler(consumeChannel, processor, {
        queue: topology.queue,
        publishChannel,
        messageId: options.messageId,
        payload: options.payload,
        retryDelaysMs: topology.retryDelaysMs,
        deadLetter: options.deadLetter,
        batch: options.batch,
        requeueDelayMs: options.requeueDelayMs,
        events,
        inFlight,
        beforeAck: options.beforeAck,
        // This consumer owns its channel, so batch mode can ack runs of deliveries with one frame.
        coalesceAcks: processor.kind === 'batch',
        // Re-subscribing is what a reconnect does: treat a broker-side cancel like a lost channel.
        onCancelled: () => markLost(toAmqpError(AmqpErrorCodes.CONSUMER_CANCELLED, 'consumer cancelled by the broker')),
      });
      const { consumerTag } = await consumeChannel.consume(topology.queue, handler, { noAck: false });
      return { connection, consumeChannel, publishChannel, consumerTag, handler, lost, detach };
    } catch (error) {
      if (owned) await quietly(() => connection.close());
      else for (const channel of channels) await quietly(() => channel.close());
      detach();
      throw error;
    }
  }

  async function closeSession(session: Session): Promise<void> {
    session.detach();
    // Channels first: their close-ok comes after the broker has applied every ack sent on them.
    // Closing only the connection could let its close frame overtake acks still queued in
    // amqplib's per-channel buffers, and committed messages would come back as redeliveries.
    await quietly(() => session.consumeChannel.close());
    await quietly(() => session.publishChannel.close());
    if (options.connection === undefined) await quietly(() => session.connection.close());
  }

  /** Resolves after `ms`, or at once when `stop()` is called. */
  function pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Watches the session; when it is lost, reopens it with backoff until it works or the consumer stops. */
  async function supervise(first: Session): Promise<void> {
    let session: Session | undefined = first;
    while (!stopping) {
      if (session === undefined) {
        let attempt = 0;
        while (!stopping && session === undefined) {
          attempt += 1;
          const delayMs = backoffDelay(attempt, reconnect);
          await pause(delayMs);
          if (stopping) return;
          try {
            session = await openSession();
            if (stopping) {
              // stop() ran while this attempt was connecting and did not see this session: close it here.
              await closeSession(session);
              return;
            }
            current = session;
            status = 'running';
            events.emit('reconnect', { attempt, delayMs });
          } catch (error) {
            events.emit(
              'error',
              toAmqpError(AmqpErrorCodes.CONNECTION_LOST, `reconnect attempt ${attempt} to RabbitMQ failed`, error, {
                details: { queue: topology.queue, attempt },
              }),
            );
          }
        }
        if (session === undefined) return;
      }
      const stopped = new Promise<'stopped'>((resolve) => (wakeUp = () => resolve('stopped')));
      const reason = await Promise.race([session.lost, stopped]);
      if (stopping || reason === 'stopped') return;
      status = 'reconnecting';
      events.emit(
        'error',
        toAmqpError(AmqpErrorCodes.CONNECTION_LOST, `lost the RabbitMQ connection of ${topology.queue}; reconnecting`, reason, {
          details: { queue: topology.queue },
        }),
      );
      // Unacked deliveries of the old channel go back to the queue; handlers still running there
      // fail to ack, and their redeliveries resolve as `duplicate`.
      await closeSession(session);
      if (current === session) current = undefined;
      session = undefined;
    }
  }

  return {
    get status() {
      return status;
    },
    on: events.on.bind(events) as ConsumerEventEmitter['on'],
    async start() {
      if (status !== 'idle' && status !== 'stopped') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `start() called while ${status}`);
      status = 'starting';
      stopping = false;
      try {
        await checkTablesAtStart(processor, events);
      } catch (error) {
        status = 'stopped';
        throw error;
      }
      let first: Session;
      try {
        first = await openSession();
      } catch (error) {
        status = 'stopped';
        throw toAmqpError(AmqpErrorCodes.CONNECT_FAILED, `could not start consuming ${topology.queue}`, error, { details: { queue: topology.queue } });
      }
      current = first;
      status = 'running';
      loop = supervise(first).catch((error) =>
        events.emit('error', toAmqpError(AmqpErrorCodes.CONNECTION_LOST, `consumer loop failed: ${describeError(error)}`, error)),
      );
    },
    async stop() {
      if (status === 'idle' || status === 'stopped' || stopping) return;
      stopping = true;
      status = 'stopping';
      wakeUp?.();
      const session = current;
      if (session !== undefined) {
        // No new deliveries after cancel-ok; the ones already received are finished, not dropped.
        await quietly(() => session.consumeChannel.cancel(session.consumerTag));
        await session.handler.flush();
      }
      const left = await inFlight.drain(stopTimeoutMs);
      if (left > 0) {
        events.emit(
          'error',
          toAmqpError(AmqpErrorCodes.STOP_TIMEOUT, `${left} deliveries still in progress after ${stopTimeoutMs} ms; closing anyway (they will be redelivered)`),
        );
      }
      await loop;
      if (session !== undefined) await closeSession(session);
      current = undefined;
      status = 'stopped';
    },
  };
}
