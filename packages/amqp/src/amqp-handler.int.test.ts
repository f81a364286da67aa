import { InboxError, type InboxMessage, type InboxOutcome, isInboxError, PermanentError, withInbox } from '@inboxed/core';
import { uniqueName, waitFor } from '@inboxed/test-support';
import amqp from 'amqplib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpTestKit, createAmqpTestKit } from '../test/amqp-test-kit.js';
import { HARNESS_RETRY_DELAYS_MS } from '../test/harness.js';
import { createAmqpMessageHandler } from './amqp-handler.js';
import { assertAmqpTopology } from './amqp-topology.js';

describe('createAmqpMessageHandler in a hand-written channel.consume loop', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp_low');
  });
  afterEach(async () => {
    await k.close();
  });

  /** A confirm channel with the queue's retry and dead-letter topology declared, prefetch 10. */
  const topologyChannel = async (connection: amqp.ChannelModel) => {
    const channel = await connection.createConfirmChannel();
    await assertAmqpTopology(channel, { queue: k.h.queue, retryDelaysMs: HARNESS_RETRY_DELAYS_MS });
    await channel.prefetch(10);
    return channel;
  };

  it("processes, dedups and dead-letters on the caller's own confirm channel; the signal reaches handlers", async () => {
    const connection = await amqp.connect(k.h.url);
    try {
      const channel = await topologyChannel(connection);
      const stopping = new AbortController();
      const signals: AbortSignal[] = [];
      const handler = k.recorder.wrap(
        withInbox(
          async (message, tx: any, context) => {
            signals.push(context.signal);
            if (message.id === 'poison') throw new PermanentError('bad order');
            await tx.insert(k.t.effects).values({ messageId: message.id });
          },
          { db: k.t.db, consumer: k.consumerName, tables: { schema: k.t.schema } },
        ),
      );
      const onMessage = createAmqpMessageHandler(channel, handler, { queue: k.h.queue, retryDelaysMs: HARNESS_RETRY_DELAYS_MS, signal: stopping.signal });
      const events: string[] = [];
      onMessage.on('duplicate', (o) => events.push(`duplicate:${o.messageId}`));
      onMessage.on('dead_letter', (o) => events.push(`dead_letter:${o.messageId}`));
      const { consumerTag } = await channel.consume(k.h.queue, onMessage);
      await k.h.publish([
        { id: 'low-1', payload: { a: 1 } },
        { id: 'low-1', payload: { a: 1 } },
        { id: 'poison', payload: { a: 2 } },
      ]);
      await k.recorder.waitForCount(3);
      await channel.cancel(consumerTag);
      expect(await onMessage.drain(5000)).toBe(0);
      await channel.close();
      stopping.abort();
      expect(signals.length).toBeGreaterThan(0);
      expect(signals.every((signal) => signal.aborted)).toBe(true);
      expect(events.sort()).toEqual(['dead_letter:poison', 'duplicate:low-1']);
      expect(await k.t.countEffects()).toBe(1);
      expect(await k.h.pending()).toBe(0);
      expect(await k.h.depth(k.h.deadLetterQueue)).toBe(1);
    } finally {
      await connection.close();
    }
  });

  it('once its signal fired, deliveries not started are held unprocessed and requeued by the drain, never run with a fired signal', async () => {
    const connection = await amqp.connect(k.h.url);
    try {
      const channel = await topologyChannel(connection);
      const stopping = new AbortController();
      stopping.abort();
      let calls = 0;
      const onMessage = createAmqpMessageHandler(
        channel,
        k.processor(() => {
          calls++;
          throw new Error('fails for real');
        }),
        { queue: k.h.queue, retryDelaysMs: HARNESS_RETRY_DELAYS_MS, signal: stopping.signal },
      );
      await k.h.publish([{ id: 'late-1', payload: {} }]);
      let deliveries = 0;
      const { consumerTag } = await channel.consume(k.h.queue, (delivery) => {
        deliveries++;
        onMessage(delivery);
      });
      await waitFor('the delivery arrived', async () => deliveries >= 1);
      await new Promise((resolve) => setTimeout(resolve, 300));
      // Held until the drain: not requeued straight back to this consumer in a loop.
      expect(deliveries).toBe(1);
      await channel.cancel(consumerTag);
      expect(await onMessage.drain(5000)).toBe(0);
      await channel.close();
      // Before, each delivery ran and its real failure was retried uncounted (consumer-stopping), for ever.
      expect(calls).toBe(0);
      expect(await k.h.depth()).toBe(1);
      expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
      expect(await k.t.query(`select count(*)::int as n from "${k.t.schema}".inbox_attempts`)).toEqual([{ n: 0 }]);
    } finally {
      await connection.close();
    }
  });

  it('a held delivery whose channel closed before the drain is reported as a refused requeue; the broker has it back', async () => {
    const connection = await amqp.connect(k.h.url);
    try {
      const channel = await topologyChannel(connection);
      const stopping = new AbortController();
      stopping.abort();
      const onMessage = createAmqpMessageHandler(channel, k.processor(), { queue: k.h.queue, retryDelaysMs: HARNESS_RETRY_DELAYS_MS, signal: stopping.signal });
      const errors: InboxError[] = [];
      onMessage.on('error', (error) => errors.push(error));
      await k.h.publish([{ id: 'late-1', payload: {} }]);
      let deliveries = 0;
      await channel.consume(k.h.queue, (delivery) => {
        deliveries++;
        onMessage(delivery);
      });
      await waitFor('the delivery arrived', async () => deliveries >= 1);
      await channel.close(); // lost with the connection, say
      expect(await onMessage.drain(5000)).toBe(0);
      // Not "a settle threw unexpectedly; it had already been requeued": neither is true.
      expect(errors.map((error) => [error.code, error.messageIds])).toEqual([['AMQP_ACK_FAILED', ['late-1']]]);
      expect(errors[0]!.message).toMatch(/^requeue failed; the broker will redeliver: .*Channel closed/);
      expect(await k.h.depth()).toBe(1);
    } finally {
      await connection.close();
    }
  });

  it('needs a confirm channel to publish retry and dead-letter copies', async () => {
    const connection = await amqp.connect(k.h.url);
    try {
      const channel = await connection.createChannel();
      expect(() => createAmqpMessageHandler(channel, k.processor(), { queue: k.h.queue })).toThrow(/confirm channel/);
    } finally {
      await connection.close();
    }
  });
});

describe('publisher confirms: the original is acked only once its copy is confirmed', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp_confirm');
  });
  afterEach(async () => {
    await k.close();
  });

  it.each([
    ['dead-letter', () => new PermanentError('bad'), { deadLetter: { queue: uniqueName('missing_dlq') } }],
    ['retry', () => new Error('try again later'), { retryDelaysMs: [777] }],
  ] as const)('an unroutable %s copy is never acked: the original is requeued, not lost', async (_kind, failure, options) => {
    const consumer = k.consume(
      k.processor(() => {
        throw failure();
      }),
      { ...options, assertTopology: false, requeueDelayMs: 100 },
    );
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    await consumer.start();
    await k.h.publishRaw({ a: 1 }, { messageId: 'kept-1' });
    await waitFor('an unroutable report', () => errors.some((e) => isInboxError(e.cause) && e.cause.code === 'AMQP_UNROUTABLE'), 20_000);
    await consumer.stop();
    const unroutable = errors.find((e) => e.code === 'AMQP_PUBLISH_FAILED')!;
    expect(unroutable.messageIds).toEqual(['kept-1']);
    // Still in the work queue, nothing committed, nothing anywhere else.
    expect(await k.h.depth()).toBe(1);
    expect(await k.t.countEffects()).toBe(0);
    for (const queue of [...k.h.retryQueues, k.h.deadLetterQueue]) expect(await k.h.depth(queue)).toBe(0);
  });
});

describe('retry copies and the attempt header', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp_attempt');
  });
  afterEach(async () => {
    await k.close();
  });

  it('only a handler failure advances the attempt: an outage, a lost lease and busy keep it; busy emits busy, not retry', async () => {
    const connection = await amqp.connect(k.h.url);
    // A long tier, so the copies stay in the retry queue where the test can read them.
    const parked = `${k.h.queue}.retry.60000`;
    try {
      const channel = await connection.createConfirmChannel();
      await assertAmqpTopology(channel, { queue: k.h.queue, retryDelaysMs: [60_000] });
      const retry = (m: InboxMessage, reason: string, code: string): InboxOutcome => ({
        status: 'retry',
        messageId: m.id,
        consumer: 'c',
        reason,
        attempt: m.attempt ?? 1,
        retryAfterMs: 10,
        error: new InboxError(code, 'simulated'),
      });
      const outcomes: Record<string, (m: InboxMessage) => InboxOutcome> = {
        outage: (m) => retry(m, 'database-unavailable', 'DATABASE_UNAVAILABLE'),
        failing: (m) => retry(m, 'handler-failed', 'HANDLER_FAILED'),
        'lease-lost': (m) => retry(m, 'lease-lost', 'INTERNAL_ERROR'),
        busy: (m) => ({ status: 'busy', messageId: m.id, consumer: 'c', reason: 'lease-held', attempt: m.attempt ?? 1, retryAfterMs: 10 }),
      };
      const processor = Object.assign(async (m: InboxMessage): Promise<InboxOutcome> => outcomes[m.id]!(m), {
        kind: 'single' as const,
        consumer: 'c',
        checkTables: async () => {},
        observe: () => {},
      });
      const onMessage = createAmqpMessageHandler(channel, processor, { queue: k.h.queue, retryDelaysMs: [60_000] });
      onMessage.on('error', () => {}); // the simulated outage is reported once
      const events: string[] = [];
      onMessage.on('retry', (o) => events.push(`retry:${o.messageId}`));
      onMessage.on('busy', (o, timing) => {
        events.push(`busy:${o.messageId}`);
        expect(timing.durationMs).toBeGreaterThanOrEqual(0);
      });
      const { consumerTag } = await channel.consume(k.h.queue, onMessage);
      for (const id of Object.keys(outcomes)) await k.h.publishRaw({ id }, { messageId: id, headers: { 'x-inboxed-attempt': 2 } });
      await waitFor('every copy parked', async () => (await k.h.depth(parked)) === 4);
      await channel.cancel(consumerTag);
      expect(await onMessage.drain(5000)).toBe(0);
      const copies = await k.h.drain(parked);
      const attemptOf = (id: string) => copies.find((c) => c.properties.messageId === id)!.properties.headers!['x-inboxed-attempt'];
      expect(attemptOf('outage')).toBe(2); // delivered as attempt 3, not counted: stays at 2
      expect(attemptOf('lease-lost')).toBe(2);
      expect(attemptOf('busy')).toBe(2);
      expect(attemptOf('failing')).toBe(3); // attempt 3 failed: the next delivery is attempt 4
      expect(copies.every((c) => c.properties.headers!['x-inboxed-original-queue'] === k.h.queue)).toBe(true);
      expect(events.sort()).toEqual(['busy:busy', 'retry:failing', 'retry:lease-lost', 'retry:outage']);
      // Moved to the retry queue, not acked as done, never dead-lettered.
      expect(await k.h.depth()).toBe(0);
      expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
    } finally {
      await k.h.channel.deleteQueue(parked).catch(() => undefined);
      await connection.close();
    }
  });
});
