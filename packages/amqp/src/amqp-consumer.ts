import { isInboxError } from '@inboxed/core';
import { checkTablesAtStart, ConsumerEventEmitter, ConsumerLifecycle, guardRetentionAtStart, type InboxConsumer, InFlight } from '@inboxed/core/adapter';
import { createDeliveryHandler } from './amqp-deliveries.js';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import { resolveMessageId } from './amqp-message.js';
import { type AmqpConsumerOptions, resolveConsumerOptions } from './amqp-options.js';
import { ReconnectPacing } from './amqp-reconnect.js';
import { amqpRedeliveryHorizon } from './amqp-retention.js';
import { cancelSession, closeSession, openSession, type Session, type SessionConfig } from './amqp-session.js';
import { resolveTopology } from './amqp-topology.js';

/** Resolves when `signal` fires (at once if it has); the listener is removed by `release`. */
function aborted(signal: AbortSignal): { promise: Promise<'aborted'>; release: () => void } {
  let release = () => {};
  const promise = new Promise<'aborted'>((resolve) => {
    if (signal.aborted) return resolve('aborted');
    const listener = () => resolve('aborted');
    signal.addEventListener('abort', listener, { once: true });
    release = () => signal.removeEventListener('abort', listener);
  });
  return { promise, release };
}

/** Resolves after `ms`, or as soon as `signal` fires. */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  const stop = aborted(signal);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([new Promise((resolve) => (timer = setTimeout(resolve, ms))), stop.promise]);
  clearTimeout(timer);
  stop.release();
}

/**
 * A RabbitMQ consumer with exactly-once database effects. Each delivery is handed to your inboxed
 * processor and settled only once its outcome is final: acked when committed, a duplicate or
 * rejected; republished to a delay queue (`retry`, `busy`) or to the dead-letter queue (`dead-letter`,
 * `conflict`) and acked only once the broker confirmed that copy. The topology (retry queues,
 * dead-letter queue, and the work queue with `queueOptions`) is declared on every (re)connect; a
 * lost connection or channel, or a consumer the broker cancelled, is re-established with backoff
 * (state `reconnecting`, then a `reconnect` event).
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
export function createAmqpConsumer(options: AmqpConsumerOptions): InboxConsumer {
  const resolved = resolveConsumerOptions(options);
  const processor = options.handler;
  const topology = resolveTopology(options.queue, options.retryDelaysMs, options.deadLetter);
  const messageId = resolveMessageId(options.messageId);
  const payload = options.payload ?? 'content-type';
  const config: SessionConfig = {
    url: options.url,
    socketOptions: options.socketOptions,
    connection: options.connection,
    connectionName: options.connectionName ?? `inboxed:${processor.consumer}:${topology.queue}`,
    topology,
    assertTopology: options.assertTopology !== false,
    queueOptions: options.queueOptions,
    prefetch: resolved.prefetch,
  };
  const events = new ConsumerEventEmitter(options.logger);
  const pacing = new ReconnectPacing(resolved.reconnect);
  const inFlight = new InFlight();
  const name = `amqp consumer of ${topology.queue}`;
  let current: Session | undefined;
  let loop: Promise<void> | undefined;
  const redeliveryHorizon = async () => [amqpRedeliveryHorizon(topology, options.queueOptions)];

  const open = () =>
    openSession(config, ({ consumeChannel, publisher, markLost }) =>
      createDeliveryHandler({
        channel: consumeChannel,
        publisher,
        processor,
        topology,
        events,
        inFlight,
        signal: () => lifecycle.signal,
        messageId,
        payload,
        batchSize: resolved.batchSize,
        batchWaitMs: resolved.batchWaitMs,
        requeueDelayMs: resolved.requeueDelayMs,
        // The consumer owns its channel, so batch mode may ack runs of deliveries with one frame.
        coalesceAcks: processor.kind === 'batch',
        beforeSettle: options.beforeSettle,
        // Re-subscribing is what a reconnect does: a broker-side cancel is handled like a lost channel.
        onCancelled: () => markLost(toAmqpError(AmqpErrorCodes.CONSUMER_CANCELLED, `the broker cancelled the consumer of ${topology.queue}`)),
      }),
    );

  /**
   * Closes a session stop() abandoned while it opened. It consumed meanwhile, and what it received
   * after the stop signal fired is held (see amqp-deliveries.ts), counted in flight: its channel,
   * closed, gives those back to the broker, and they are forgotten, or every later stop() would wait
   * for them until stopTimeoutMs.
   */
  const closeUnseen = (session: Session): Promise<void> => closeSession(session).finally(() => session.handler.discard());

  /** Reopens the session with backoff until it works or the consumer stops (then `undefined`). */
  async function reopen(signal: AbortSignal): Promise<Session | undefined> {
    for (let attempt = 1; !signal.aborted; attempt++) {
      const delayMs = pacing.delayMs(attempt);
      await pause(delayMs, signal);
      if (signal.aborted) return undefined;
      try {
        const opening = open();
        const stop = aborted(signal);
        const session = await Promise.race([opening, stop.promise]).finally(stop.release);
        if (session === 'aborted' || signal.aborted) {
          // stop() began while this attempt was connecting: whatever it opens is closed, unseen.
          void opening.then(closeUnseen, () => undefined);
          return undefined;
        }
        current = session;
        lifecycle.reconnected();
        events.logger.info({ queue: topology.queue, attempt, delayMs }, 'reconnected');
        events.emit('reconnect', { attempt, delayMs });
        return session;
      } catch (error) {
        const details = { queue: topology.queue, attempt };
        events.emit('error', toAmqpError(AmqpErrorCodes.CONNECTION_LOST, `reconnect attempt ${attempt} to RabbitMQ failed`, error, { details }));
      }
    }
    return undefined;
  }

  /**
   * Reports a lost session: the first loss of a cause at once, then at most once per 30 s per
   * cause (a broker that closes every new session, e.g. on a copy to a missing exchange, must not
   * flood the `error` listener), with the count in `details.retriesSinceLastReport`.
   */
  function reportLoss(reason: unknown): void {
    const error =
      isInboxError(reason) && reason.code === AmqpErrorCodes.CONSUMER_CANCELLED
        ? reason
        : toAmqpError(AmqpErrorCodes.CONNECTION_LOST, `lost the RabbitMQ connection of ${topology.queue}; reconnecting`, reason, {
            details: { queue: topology.queue },
          });
    events.reportRecurring(`${error.code}:${String(error.details.amqpCode ?? '')}`, error);
  }

  /** Watches the session; when it is lost, reports it, closes what is left of it and reopens it (paced across sessions that die young). */
  async function supervise(first: Session, signal: AbortSignal): Promise<void> {
    let session: Session | undefined = first;
    let openedAt = Date.now();
    while (session !== undefined && !signal.aborted) {
      const stop = aborted(signal);
      const reason = await Promise.race([session.lost, stop.promise]);
      stop.release();
      if (signal.aborted) return;
      pacing.lost(openedAt);
      lifecycle.reconnecting();
      events.logger.warn({ queue: topology.queue }, 'connection lost; reconnecting');
      reportLoss(reason);
      // Its unacked deliveries go back to the queue (a partial batch is dropped, not processed):
      // handlers still running on it fail to ack, and their redeliveries resolve as `duplicate`.
      session.handler.discard();
      if (current === session) current = undefined;
      await closeSession(session);
      session = await reopen(signal);
      openedAt = Date.now();
    }
  }

  const lifecycle: ConsumerLifecycle = new ConsumerLifecycle(
    {
      async begin(signal) {
        await checkTablesAtStart(processor, events);
        // Before connecting: the horizon comes from the options, and a refusal leaves nothing open.
        await guardRetentionAtStart(options, redeliveryHorizon, events.logger, name);
        let session: Session | 'aborted';
        const opening = open();
        const stop = aborted(signal);
        try {
          session = await Promise.race([opening, stop.promise]);
        } catch (error) {
          throw toAmqpError(AmqpErrorCodes.CONNECT_FAILED, `could not start consuming ${topology.queue}${connectHint(error)}`, error, {
            details: { queue: topology.queue },
          });
        } finally {
          stop.release();
        }
        if (session === 'aborted') {
          // stop() was called while the broker had not answered yet: whatever opens is closed, unseen.
          void opening.then(closeUnseen, () => undefined);
          throw toAmqpError(AmqpErrorCodes.CONNECT_FAILED, `start of ${topology.queue} abandoned: stop() was called before the broker answered`, undefined, {
            details: { queue: topology.queue },
          });
        }
        current = session;
        loop = supervise(session, signal).catch((error) =>
          events.emit('error', toAmqpError(AmqpErrorCodes.CONNECTION_LOST, 'the reconnect loop failed', error, { details: { queue: topology.queue } })),
        );
      },
      async quiesce() {
        // No new deliveries after cancel-ok; those in progress are finished, a partial batch is requeued (the signal fired).
        const session = current;
        if (session === undefined) return;
        await cancelSession(session);
        await session.handler.flush();
      },
      async end() {
        await loop;
        loop = undefined;
        const session = current;
        current = undefined;
        if (session !== undefined) await closeSession(session);
      },
      connected: () => current?.alive() === true,
    },
    events,
    inFlight,
    resolved.stopTimeoutMs,
    name,
  );

  return {
    start: () => lifecycle.start(),
    stop: () => lifecycle.stop(),
    status: () => lifecycle.status(),
    on: (event, listener) => events.on(event, listener),
    redeliveryHorizon,
  };
}

/**
 * A hint for amqplib's least helpful connect error: RabbitMQ closes the connection while it opens,
 * and amqplib says only "Expected ConnectionOpenOk; got <ConnectionClose ...>". That is almost always
 * a virtual host that does not exist or that the user may not access.
 */
function connectHint(error: unknown): string {
  const message = error instanceof Error ? error.message : '';
  return /Expected ConnectionOpenOk/i.test(message)
    ? ' (the broker closed the connection while opening it: does the URL name a virtual host that exists and that this user may access?)'
    : '';
}
