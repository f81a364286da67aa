import { InboxError, InboxErrorCodes, type AnyInboxProcessor } from '@inboxed/core';
import { ConsumerEventEmitter, type ConsumerOptions, InFlight } from '@inboxed/core/adapter';
import type { Channel, ConfirmChannel, ConsumeMessage } from 'amqplib';
import { createDeliveryHandler } from './amqp-deliveries.js';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import { resolveMessageId } from './amqp-message.js';
import { resolveBatch, resolveRequeueDelay, validateProcessor } from './amqp-options.js';
import { ConfirmedPublisher } from './amqp-publisher.js';
import { resolveTopology, type DeadLetterTarget } from './amqp-topology.js';

/** Options of {@link createAmqpMessageHandler}: the per-delivery options of `createAmqpConsumer`, same names and defaults. */
export interface AmqpMessageHandlerOptions extends Omit<ConsumerOptions<ConsumeMessage, 'header'>, 'handler' | 'stopTimeoutMs' | 'beforeSettle'> {
  /** The work queue the channel consumes (retry copies come back to it). @defaultValue none (required) */
  queue: string;
  /**
   * Confirm channel for retry and dead-letter copies. By default this is the consuming channel
   * itself (the README pattern), and the handler never closes it. Copies are fitted with amqplib's
   * own encoder before they are published (headers it cannot encode are left out), so a publish
   * does not throw for header reasons. Should one still throw after amqplib 0.10 registered its
   * confirm callback (2.x registers it only after encoding), the channel's later confirms can no
   * longer be matched to their copies: copies awaiting a confirm fail and every later copy fails too
   * (`AMQP_PUBLISH_FAILED`, originals requeued, never acked), while the channel stays open and keeps
   * consuming. Create a new handler with a fresh confirm channel then; `createAmqpConsumer` replaces
   * its publish channel itself.
   * @defaultValue the consuming channel itself, when it is a confirm channel (`connection.createConfirmChannel()`); otherwise required
   */
  publishChannel?: ConfirmChannel;
  /** Delays of the retry queues, in ms. @defaultValue `[1000, 5000, 30000, 120000, 600000]` */
  retryDelaysMs?: readonly number[];
  /** Where dead-lettered copies go. @defaultValue `{ queue: '<queue>.dead-letter' }` */
  deadLetter?: DeadLetterTarget;
  /** Batch mode only: the most deliveries handed to the batch processor in one call (one transaction). @defaultValue 100 */
  batchSize?: number;
  /** Batch mode only: longest wait after a batch's first delivery before a partial batch is processed, in ms. @defaultValue 50 */
  batchWaitMs?: number;
  /** Pause before requeueing a delivery whose retry/dead-letter copy could not be published, in ms. @defaultValue 1000 */
  requeueDelayMs?: number;
  /**
   * Handed to every processor call (so to handlers as `context.signal`): abort it when you stop consuming.
   * Once it fired, deliveries not started yet are held unprocessed until `flush()`/`drain()` requeues them, so cancel the consumer and drain too. @defaultValue none
   */
  signal?: AbortSignal;
}

/** An `onMessage` callback for `channel.consume(queue, onMessage)`, with the controls a graceful stop needs. */
export interface AmqpMessageHandler {
  (delivery: ConsumeMessage | null): void;
  /** Subscribes to `message_processed`, `duplicate`, `retry`, `busy`, `dead_letter` and `error`; returns the function that unsubscribes. */
  on: ConsumerEventEmitter['on'];
  /** Processes a partially collected batch now (call it after cancelling the consumer); once `signal` fired, requeues it and the deliveries held since, unprocessed. */
  flush(): Promise<void>;
  /** Flushes a partial batch (see `flush`), then waits for every delivery in progress to be settled, up to `timeoutMs`; returns how many were still running. */
  drain(timeoutMs: number): Promise<number>;
}

function isConfirmChannel(channel: Channel): channel is ConfirmChannel {
  return typeof (channel as Partial<ConfirmChannel>).waitForConfirms === 'function';
}

/**
 * Turns an inboxed processor into an `onMessage` callback for your own `channel.consume` loop, with
 * the same behaviour per delivery as `createAmqpConsumer` but no connection management. Each
 * delivery is mapped to an `InboxMessage`, processed, and only then settled: `processed`,
 * `duplicate` and `rejected` are acked; `retry` and `busy` are republished (with confirms) to the
 * retry queue whose delay fits `retryAfterMs`, then acked (`busy` without counting an attempt); `dead-letter` and `conflict` are republished to the
 * dead-letter target with reason headers, then acked. A copy that is not confirmed leaves the
 * original requeued: never lost. Declare the retry and dead-letter queues with `assertAmqpTopology`.
 * Acks are sent one per delivery, since your channel may carry other consumers. The handler never
 * closes a channel you gave it (see `publishChannel` for the one case, on amqplib 0.10, where it
 * stops publishing copies on it).
 */
export function createAmqpMessageHandler(channel: Channel, processor: AnyInboxProcessor, options: AmqpMessageHandlerOptions): AmqpMessageHandler {
  if (options === null || typeof options !== 'object') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options are required');
  const publishChannel = options.publishChannel ?? (isConfirmChannel(channel) ? channel : undefined);
  if (publishChannel === undefined) {
    throw new InboxError(
      InboxErrorCodes.INVALID_OPTIONS,
      'createAmqpMessageHandler needs a confirm channel: consume on connection.createConfirmChannel() or pass options.publishChannel',
    );
  }
  validateProcessor(processor);
  const events = new ConsumerEventEmitter(options.logger);
  const inFlight = new InFlight();
  const handler = createDeliveryHandler({
    channel,
    publisher: new ConfirmedPublisher(publishChannel),
    processor,
    topology: resolveTopology(options.queue, options.retryDelaysMs, options.deadLetter),
    events,
    inFlight,
    signal: () => options.signal,
    messageId: resolveMessageId(options.messageId),
    payload: options.payload ?? 'content-type',
    ...resolveBatch(options),
    requeueDelayMs: resolveRequeueDelay(options.requeueDelayMs),
    coalesceAcks: false,
    onCancelled: () => events.emit('error', toAmqpError(AmqpErrorCodes.CONSUMER_CANCELLED, `the broker cancelled the consumer of ${options.queue}`)),
  });
  return Object.assign((delivery: ConsumeMessage | null) => handler(delivery), {
    on: events.on.bind(events) as ConsumerEventEmitter['on'],
    flush: () => handler.flush(),
    drain: async (timeoutMs: number) => {
      await handler.flush();
      return inFlight.drain(timeoutMs);
    },
  });
}
