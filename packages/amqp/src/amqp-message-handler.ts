import { coalescedAcks, individualAcks } from './amqp-acks.js';
import {
  actionFor,
  ConsumerEventEmitter,
  deadLetterHeaders,
  describeError,
  InboxError,
  InboxErrorCodes,
  InFlight,
  OutcomeReasons,
  sleep,
  type AnyInboxProcessor,
  type InboxMessage,
  type InboxOutcome,
} from '@inboxed/core';
import type { Channel, ConfirmChannel, ConsumeMessage, Options } from 'amqplib';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import {
  ATTEMPT_HEADER,
  ORIGINAL_QUEUE_HEADER,
  attemptOf,
  extractMessageId,
  toInboxMessage,
  type MessageIdExtractor,
  type PayloadMode,
} from './amqp-message.js';
import { ConfirmedPublisher } from './amqp-publisher.js';
import { deadLetterDestination, resolveTopology, retryQueueName, retryTierFor, type DeadLetterTarget, type Topology } from './amqp-topology.js';

/** Batch collection settings, used when the processor comes from `withInboxBatch`. */
export interface AmqpBatchOptions {
  /** Most deliveries per processor call (one transaction). Default 100. */
  size?: number;
  /** Longest wait after the first delivery of a batch before processing a partial batch, in ms. Default 50. */
  waitMs?: number;
}

/** Options of {@link createAmqpMessageHandler}. */
export interface AmqpMessageHandlerOptions {
  /** The work queue the channel consumes (retry copies dead-letter back to it). */
  queue: string;
  /**
   * Confirm channel for retry and dead-letter copies. Default: the consuming channel itself when it
   * is a confirm channel (`connection.createConfirmChannel()`); otherwise this is required.
   */
  publishChannel?: ConfirmChannel;
  /** Id extractor tried after `properties.messageId`, header `x-message-id` and header `message-id`. */
  messageId?: MessageIdExtractor;
  /** Body decoding: `'content-type'` (default: JSON when the content type says so, else a Buffer), `'json'` or `'raw'`. */
  payload?: PayloadMode;
  /** Delays of the retry queues, in ms. Default `[1000, 5000, 30000, 120000, 600000]`. */
  retryDelaysMs?: readonly number[];
  /** Dead-letter target. Default `{ queue: '<queue>.dead-letter' }`. */
  deadLetter?: DeadLetterTarget;
  /** Batch collection (batch processors only). */
  batch?: AmqpBatchOptions;
  /**
   * When a retry or dead-letter copy cannot be published, the original is requeued (never acked,
   * never lost) after this pause, so a broken dead-letter target does not hot-loop. Default 1000 ms.
   */
  requeueDelayMs?: number;
  /** @internal shared emitter of the consumer that owns this handler. */
  events?: ConsumerEventEmitter;
  /** @internal shared in-flight tracker of the consumer that owns this handler. */
  inFlight?: InFlight;
  /** @internal called when the broker cancels the consumer (`null` delivery). */
  onCancelled?: () => void;
  /**
   * @internal Coalesce acks into `multiple` acks. Only for a channel this handler consumes alone
   * (`createAmqpConsumer` in batch mode); a user's own channel may carry other consumers.
   */
  coalesceAcks?: boolean;
  /** @internal test hook: runs after the outcome is final (committed) and before the ack. */
  beforeAck?: (outcome: InboxOutcome, delivery: ConsumeMessage) => void | Promise<void>;
}

/** An `onMessage` callback for `channel.consume(queue, handler)`, with the controls a graceful stop needs. */
export interface AmqpMessageHandler {
  (delivery: ConsumeMessage | null): void;
  /** Subscribes to `message_processed`, `duplicate`, `retry`, `dead_letter`, `error`. */
  on: ConsumerEventEmitter['on'];
  /** Processes a partially collected batch now (call after cancelling the consumer). */
  flush(): Promise<void>;
  /** Waits for every delivery in progress to be settled, up to `timeoutMs`; returns how many were still running. */
  drain(timeoutMs: number): Promise<number>;
}

interface Pending {
  delivery: ConsumeMessage;
  id: string | undefined;
  mapped: { message: InboxMessage } | { outcome: InboxOutcome };
}

function isConfirmChannel(channel: Channel): channel is ConfirmChannel {
  return typeof (channel as Partial<ConfirmChannel>).waitForConfirms === 'function';
}

/** Properties of a copy: the original's, minus the two that would break or shorten the copy's life. */
function copyProperties(delivery: ConsumeMessage, id: string | undefined): Options.Publish {
  const p = delivery.properties;
  const copy: Options.Publish = {
    contentType: p.contentType,
    contentEncoding: p.contentEncoding,
    // The copy is the only one left once the original is acked: keep it on disk.
    persistent: true,
    priority: p.priority,
    correlationId: p.correlationId,
    replyTo: p.replyTo,
    messageId: p.messageId ?? id,
    timestamp: p.timestamp,
    type: p.type,
    appId: p.appId,
    // Not copied: `expiration` (the copy must not expire in a retry or dead-letter queue) and
    // `userId` (the broker rejects a user id other than the publishing connection's).
  };
  for (const key of Object.keys(copy) as (keyof Options.Publish)[]) if (copy[key] === undefined) delete copy[key];
  return copy;
}

/**
 * Turns an inboxed processor into an `onMessage` callback for your own `channel.consume` loop.
 * Per delivery: map to an `InboxMessage`, run the processor, then act on the outcome and only
 * then ack: `processed` / `duplicate` / `rejected` are acked; `retry` is republished (with
 * confirms) to the retry queue whose delay fits `retryAfterMs`, then acked; `dead-letter` /
 * `conflict` are republished to the dead-letter target with reason headers, then acked. If a
 * copy cannot be published the original is nacked with requeue: never lost.
 * Declare the retry and dead-letter queues yourself (or let `createAmqpConsumer` do it).
 *
 * ```ts
 * const channel = await connection.createConfirmChannel();
 * await channel.prefetch(20);
 * const onMessage = createAmqpMessageHandler(channel, withInbox(handle, { db, consumer: 'billing' }), { queue: 'orders' });
 * await channel.consume('orders', onMessage);
 * ```
 */
export function createAmqpMessageHandler(channel: Channel, processor: AnyInboxProcessor, options: AmqpMessageHandlerOptions): AmqpMessageHandler {
  const publishChannel = options.publishChannel ?? (isConfirmChannel(channel) ? channel : undefined);
  if (publishChannel === undefined) {
    throw new InboxError(
      InboxErrorCodes.INVALID_OPTIONS,
      'createAmqpMessageHandler needs a confirm channel: consume on connection.createConfirmChannel() or pass options.publishChannel',
    );
  }
  if (typeof processor !== 'function' || (processor.kind !== 'single' && processor.kind !== 'batch')) {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'the handler must be a processor from withInbox() or withInboxBatch()');
  }
  const topology: Topology = resolveTopology(options.queue, options.retryDelaysMs, options.deadLetter);
  const publisher = new ConfirmedPublisher(publishChannel);
  const events = options.events ?? new ConsumerEventEmitter();
  const inFlight = options.inFlight ?? new InFlight();
  const destination = deadLetterDestination(topology);
  const acks = options.coalesceAcks === true ? coalescedAcks(channel) : individualAcks(channel);
  const requeueDelayMs = options.requeueDelayMs ?? 1000;
  const batchSize = options.batch?.size ?? 100;
  const batchWaitMs = options.batch?.waitMs ?? 50;
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.batch.size must be an integer >= 1');
  const context = { queue: topology.queue, consumer: processor.consumer, payload: options.payload ?? 'content-type', messageId: options.messageId };

  /** Acks or nacks, reporting (never throwing) when the channel is gone: the broker then redelivers. */
  function settleOnChannel(delivery: ConsumeMessage, ack: boolean, messageId: string): void {
    try {
      if (ack) acks.ack(delivery);
      else acks.requeue(delivery);
    } catch (error) {
      events.emit(
        'error',
        toAmqpError(AmqpErrorCodes.ACK_FAILED, `${ack ? 'ack' : 'nack'} failed; the broker will redeliver`, error, { messageIds: [messageId] }),
      );
    }
  }

  async function publishCopy(delivery: ConsumeMessage, outcome: InboxOutcome, id: string | undefined): Promise<void> {
    const headers = { ...delivery.properties.headers };
    const properties = copyProperties(delivery, id);
    if (actionFor(outcome.status) === 'retry') {
      const delay = retryTierFor(outcome.retryAfterMs, topology.retryDelaysMs);
      // Only a handler failure is an attempt the core counts; a database outage, a lock wait or a
      // serialization conflict is nobody's fault and must not push the message toward maxAttempts.
      const previous = attemptOf(delivery) - 1;
      const attempt = outcome.reason === OutcomeReasons.HANDLER_FAILED ? (outcome.attempt ?? previous + 1) : previous;
      if (attempt > 0) headers[ATTEMPT_HEADER] = attempt;
      else delete headers[ATTEMPT_HEADER];
      headers[ORIGINAL_QUEUE_HEADER] = topology.queue;
      await publisher.publish('', retryQueueName(topology.queue, delay), delivery.content, { ...properties, headers }, [outcome.messageId]);
      return;
    }
    Object.assign(headers, deadLetterHeaders(outcome), {
      [ORIGINAL_QUEUE_HEADER]: topology.queue,
      'x-inboxed-original-exchange': delivery.fields.exchange,
      'x-inboxed-original-routing-key': delivery.fields.routingKey,
    });
    const { exchange, routingKey } = topology.deadLetter;
    await publisher.publish(exchange, routingKey, delivery.content, { ...properties, headers }, [outcome.messageId]);
  }

  /** Acts on a final outcome: publish the retry / dead-letter copy if any, then ack; requeue when that fails. */
  async function settle(pending: Pending, outcome: InboxOutcome): Promise<void> {
    const { delivery, id } = pending;
    if (options.beforeAck !== undefined) await options.beforeAck(outcome, delivery);
    if (actionFor(outcome.status) !== 'ack') {
      try {
        await publishCopy(delivery, outcome, id);
      } catch (error) {
        events.emit(
          'error',
          toAmqpError(AmqpErrorCodes.PUBLISH_FAILED, 'could not publish the retry/dead-letter copy; the original is requeued', error, {
            messageIds: [outcome.messageId],
          }),
        );
        await sleep(requeueDelayMs);
        settleOnChannel(delivery, false, outcome.messageId);
        return;
      }
    }
    settleOnChannel(delivery, true, outcome.messageId);
    events.emitOutcome(outcome, destination);
  }

  /** A processor that broke its never-throw contract: requeue after a pause rather than guess. */
  async function processorFailed(entries: Pending[], error: unknown): Promise<void> {
    events.emit(
      'error',
      new InboxError(InboxErrorCodes.HANDLER_FAILED, `processor threw (it should resolve to an outcome): ${describeError(error)}`, {
        cause: error,
        messageIds: entries.map((e) => e.id ?? '<missing>'),
      }),
    );
    await sleep(requeueDelayMs);
    for (const entry of entries) settleOnChannel(entry.delivery, false, entry.id ?? '<missing>');
  }

  async function processOne(entry: Pending): Promise<void> {
    let outcome: InboxOutcome;
    try {
      outcome = 'outcome' in entry.mapped ? entry.mapped.outcome : await (processor as (m: InboxMessage) => Promise<InboxOutcome>)(entry.mapped.message);
    } catch (error) {
      return processorFailed([entry], error);
    }
    await settle(entry, outcome);
  }

  async function processBatch(entries: Pending[]): Promise<void> {
    const decoded = entries.filter((e) => 'message' in e.mapped);
    const settled: Promise<void>[] = entries.filter((e) => 'outcome' in e.mapped).map((e) => settle(e, (e.mapped as { outcome: InboxOutcome }).outcome));
    if (decoded.length > 0) {
      let outcomes: InboxOutcome[];
      try {
        outcomes = await (processor as (m: readonly InboxMessage[]) => Promise<InboxOutcome[]>)(
          decoded.map((e) => (e.mapped as { message: InboxMessage }).message),
        );
        if (outcomes.length !== decoded.length) throw new Error(`batch processor returned ${outcomes.length} outcomes for ${decoded.length} messages`);
      } catch (error) {
        settled.push(processorFailed(decoded, error));
        await Promise.all(settled);
        return;
      }
      for (const [i, entry] of decoded.entries()) settled.push(settle(entry, outcomes[i]!));
    }
    await Promise.all(settled);
  }

  let buffer: Pending[] = [];
  let timer: NodeJS.Timeout | undefined;
  const track = (task: Promise<void>) =>
    inFlight.track(task.catch((error) => events.emit('error', toAmqpError(AmqpErrorCodes.ACK_FAILED, 'settling a delivery failed', error))));

  function flushBatch(): Promise<void> {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    if (buffer.length === 0) return Promise.resolve();
    const entries = buffer;
    buffer = [];
    return track(processBatch(entries));
  }

  const onMessage = (delivery: ConsumeMessage | null): void => {
    if (delivery === null) {
      events.emit('error', toAmqpError(AmqpErrorCodes.CONSUMER_CANCELLED, `the broker cancelled the consumer of ${topology.queue}`));
      options.onCancelled?.();
      return;
    }
    acks.received(delivery);
    const id = extractMessageId(delivery, options.messageId);
    const entry: Pending = { delivery, id, mapped: toInboxMessage(delivery, context, id) };
    if (processor.kind === 'single') {
      void track(processOne(entry));
      return;
    }
    buffer.push(entry);
    if (buffer.length >= batchSize) void flushBatch();
    else timer ??= setTimeout(() => void flushBatch(), batchWaitMs);
  };

  return Object.assign(onMessage, {
    on: events.on.bind(events) as ConsumerEventEmitter['on'],
    flush: flushBatch,
    drain: async (timeoutMs: number) => {
      await flushBatch();
      return inFlight.drain(timeoutMs);
    },
  });
}
