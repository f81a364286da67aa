import { describeError, type AnyInboxProcessor, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import { callProcessor, type ConsumerEventEmitter, type InFlight, type PayloadMode, sleep } from '@inboxed/core/adapter';
import type { Channel, ConsumeMessage } from 'amqplib';
import { type AckStrategy, coalescedAcks, individualAcks } from './amqp-acks.js';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import { mapDelivery, type ResolvedMessageId } from './amqp-message.js';
import type { ConfirmedPublisher } from './amqp-publisher.js';
import { createSettlement, type Delivery } from './amqp-settlement.js';
import type { Topology } from './amqp-topology.js';

/** @internal Everything one channel's delivery handler needs; shared by the consumer and `createAmqpMessageHandler`. */
export interface DeliveryHandlerContext {
  /** The channel the deliveries arrive on: their acks go to it, and only to it. */
  channel: Channel;
  publisher: ConfirmedPublisher;
  processor: AnyInboxProcessor;
  topology: Topology;
  events: ConsumerEventEmitter;
  inFlight: InFlight;
  /** The signal handed to every processor call (fires on stop). */
  signal: () => AbortSignal | undefined;
  messageId: ResolvedMessageId;
  payload: PayloadMode;
  batchSize: number;
  batchWaitMs: number;
  requeueDelayMs: number;
  /** Coalesce acks into `multiple` acks: only on a channel this handler consumes alone. */
  coalesceAcks: boolean;
  beforeSettle?: ((outcome: InboxOutcome) => void | Promise<void>) | undefined;
  /** The broker cancelled the consumer (a `null` delivery). */
  onCancelled: () => void;
}

/** @internal An `onMessage` callback for `channel.consume`, with the controls a stop and a lost channel need. */
export interface DeliveryHandler {
  (delivery: ConsumeMessage | null): void;
  /** Processes a partially collected batch now (after cancelling the consumer); once the stop signal fired, requeues it and the deliveries held since, unprocessed. */
  flush(): Promise<void>;
  /** Forgets a partially collected batch: its channel is gone, so the broker redelivers those deliveries. */
  discard(): void;
}

type Entry = Delivery & ({ message: InboxMessage } | { outcome: InboxOutcome });
type MessageEntry = Delivery & { message: InboxMessage };
/** A delivery admitted for processing: tracked in flight until `finish`'s task settles it. */
interface Buffered {
  entry: MessageEntry;
  finish: (task: Promise<void>) => Promise<void>;
}

/**
 * @internal The per-channel delivery pipeline: map each delivery (or decide its outcome: no id,
 * unparseable body, which processor observers are told of), hand it to the processor through the
 * core's `callProcessor` (one at a time per delivery, or collected into batches of at most
 * `batchSize` for a batch processor), then settle it (`amqp-settlement.ts`). Every task is tracked in
 * `inFlight`, so a stop waits for it.
 */
export function createDeliveryHandler(context: DeliveryHandlerContext): DeliveryHandler {
  const { processor, events } = context;
  const channelAcks = context.coalesceAcks ? coalescedAcks(context.channel) : individualAcks(context.channel);
  // What was sent to the broker for each delivery, so a settle that throws part-way can tell what is left to do.
  const sent = new WeakMap<ConsumeMessage, 'acked' | 'requeued'>();
  const acks: AckStrategy = {
    received: (delivery) => channelAcks.received(delivery),
    ack(delivery) {
      sent.set(delivery, 'acked');
      return channelAcks.ack(delivery);
    },
    requeue(delivery) {
      channelAcks.requeue(delivery); // throws, unsent, when the channel is gone
      sent.set(delivery, 'requeued');
    },
  };
  const settle = createSettlement({
    acks,
    publisher: context.publisher,
    topology: context.topology,
    messageIdHeader: context.messageId.header,
    events,
    processor,
    requeueDelayMs: context.requeueDelayMs,
    beforeSettle: context.beforeSettle,
  });
  const mapping = { queue: context.topology.queue, consumer: processor.consumer, payload: context.payload, messageId: context.messageId };
  // OpenTelemetry: W3C trace context arrives in the AMQP headers, which every message carries as `message.headers`.
  events.instrument({ system: 'rabbitmq', destination: context.topology.queue }, context.inFlight);

  /**
   * A settle that threw where nothing should throw (a bug in a middleware, a hook or inboxed): a
   * delivery neither acked nor requeued yet is requeued (after `requeueDelayMs`, so one that fails
   * this way every time does not hot-loop), so it never holds a prefetch slot for ever; the
   * report says what became of it. Never rejects.
   */
  const settleFailed = async (entry: Delivery, error: unknown): Promise<void> => {
    let fate: string;
    try {
      const already = sent.get(entry.delivery);
      if (already === 'acked') fate = 'it had already been acked (its outcome event may be missing)';
      else if (already === 'requeued') fate = 'it had already been requeued';
      else {
        await sleep(context.requeueDelayMs);
        try {
          acks.requeue(entry.delivery);
          fate = 'it was requeued';
        } catch (refused) {
          fate = `it could not be requeued (${describeError(refused)}): its channel is gone, so the broker redelivers it`;
        }
      }
    } catch (unexpected) {
      fate = `what became of it is unknown (${describeError(unexpected)})`;
    }
    try {
      events.emit(
        'error',
        toAmqpError(AmqpErrorCodes.SETTLE_FAILED, `settling a delivery threw unexpectedly; ${fate}`, error, {
          messageIds: entry.id === undefined ? [] : [entry.id],
        }),
      );
    } catch {
      // Reporting must not turn into an unhandled rejection.
    }
  };
  const track = (entry: Delivery, task: Promise<void>) => context.inFlight.track(task.catch((error: unknown) => settleFailed(entry, error)));

  /**
   * Once the stop signal fired, deliveries not started yet (a partial batch, or ones the broker sent
   * before cancel-ok) are not processed, as the SQS and Kafka consumers leave theirs: a handler
   * started then would get a signal already fired, and its failure would not be counted. They are
   * held, unacked, until `flush()` (the stop, `drain()`) requeues them. Held, they fill the prefetch,
   * so a caller that aborts the signal but keeps consuming stalls instead of spinning through
   * requeues and redeliveries.
   */
  let held: Buffered[] = [];

  /** Requeues the deliveries held since the stop signal fired (see `held`). */
  function requeueHeld(): Promise<void> {
    const entries = held;
    held = [];
    if (entries.length === 0) return Promise.resolve();
    events.logger.info(
      { queue: context.topology.queue, deliveries: entries.length },
      `${entries.length} deliver${entries.length === 1 ? 'y' : 'ies'} received after the stop signal fired: requeued, not processed`,
    );
    const requeue = (entry: MessageEntry) => {
      try {
        acks.requeue(entry.delivery);
      } catch (error) {
        // Its channel is gone (a connection lost during the stop): the broker has it back already.
        events.emit('error', toAmqpError(AmqpErrorCodes.ACK_FAILED, 'requeue failed; the broker will redeliver', error, { messageIds: [entry.message.id] }));
      }
    };
    return Promise.all(entries.map(({ entry, finish }) => finish(Promise.resolve().then(() => requeue(entry))))).then(() => undefined);
  }

  /** Runs the processor once for `entries`; each entry's settle is its own task (so in flight is counted per delivery). */
  function run(entries: readonly Buffered[]): Promise<void> {
    const signal = context.signal();
    if (signal?.aborted === true) {
      held.push(...entries);
      return Promise.resolve();
    }
    const outcomes = callProcessor(
      processor,
      entries.map((e) => e.entry.message),
      signal,
      events,
    );
    return Promise.all(entries.map(({ entry, finish }, i) => finish(outcomes.then((all) => settle(entry, all[i]!))))).then(() => undefined);
  }

  /** Tracks a delivery from now on; `finish(task)` hands it the task that settles it. */
  const admit = (entry: MessageEntry): Buffered => {
    let finish!: (task: Promise<void>) => Promise<void>;
    const settled = new Promise<void>((resolve) => {
      finish = (task) => {
        resolve(task);
        return tracked;
      };
    });
    const tracked = track(entry, settled);
    return { entry, finish };
  };

  /** Decided without the processor: its observers (the outcome recorder, metrics) are told, then it is settled. */
  const settleDecided = (entry: Delivery, outcome: InboxOutcome) => {
    try {
      if (typeof processor.observe === 'function') processor.observe(outcome);
    } catch (error) {
      events.logger.error({ err: error, messageId: outcome.messageId }, `processor.observe threw: ${describeError(error)}`);
    }
    void track(entry, settle(entry, outcome));
  };

  let buffer: Buffered[] = [];
  let timer: NodeJS.Timeout | undefined;
  const takeBuffer = (): Buffered[] => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    const entries = buffer;
    buffer = [];
    return entries;
  };
  /** Runs what was collected (held instead once the stop signal fired). */
  const runBuffer = (): Promise<void> => {
    const entries = takeBuffer();
    return entries.length === 0 ? Promise.resolve() : run(entries);
  };
  // The public flush also gives back what the stop held: the caller is stopping.
  const flush = (): Promise<void> => runBuffer().then(requeueHeld);
  // The channel is gone: the broker redelivers what was collected or held; it no longer counts as in flight.
  const discard = () => {
    const forgotten = [...takeBuffer(), ...held];
    held = [];
    for (const { finish } of forgotten) void finish(Promise.resolve());
  };

  const onMessage = (delivery: ConsumeMessage | null): void => {
    if (delivery === null) {
      context.onCancelled();
      return;
    }
    const receivedAt = new Date();
    acks.received(delivery);
    const mapped = mapDelivery(delivery, mapping, receivedAt);
    const entry = { delivery, receivedAt, ...mapped } as Entry;
    if ('outcome' in entry) {
      settleDecided(entry, entry.outcome);
      return;
    }
    if (processor.kind === 'single') {
      void run([admit(entry)]);
      return;
    }
    buffer.push(admit(entry));
    if (buffer.length >= context.batchSize) void runBuffer();
    else timer ??= setTimeout(() => void runBuffer(), context.batchWaitMs);
  };

  return Object.assign(onMessage, { flush, discard });
}
