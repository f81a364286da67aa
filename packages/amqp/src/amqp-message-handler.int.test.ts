import { InboxError, PermanentError, isInboxError } from '@inboxed/core';
import { uniqueName, waitFor } from '@inboxed/test-support';
import amqp from 'amqplib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createAmqpFixture, type AmqpFixture } from '../test/amqp-fixture.js';
import { amqpUrl } from '../test/amqp-test-broker.js';
import { createAmqpMessageHandler } from './amqp-message-handler.js';
import { assertAmqpTopology } from './amqp-topology.js';

describe('createAmqpMessageHandler in a hand-written channel.consume loop', () => {
  let f: AmqpFixture;
  beforeEach(async () => {
    f = await createAmqpFixture('amqp_low');
  });
  afterEach(async () => {
    await f.close();
  });

  it("processes, dedups and dead-letters on the caller's own confirm channel", async () => {
    const connection = await amqp.connect(amqpUrl());
    try {
      const channel = await connection.createConfirmChannel();
      await assertAmqpTopology(channel, { queue: f.queue, retryDelaysMs: [300] });
      await channel.prefetch(10);
      const onMessage = createAmqpMessageHandler(
        channel,
        f.processor((m) => {
          if (m.id === 'poison') throw new PermanentError('bad order');
        }),
        { queue: f.queue, retryDelaysMs: [300] },
      );
      const events: string[] = [];
      onMessage.on('duplicate', (o) => events.push(`duplicate:${o.messageId}`));
      onMessage.on('dead_letter', (o) => events.push(`dead_letter:${o.messageId}`));
      const { consumerTag } = await channel.consume(f.queue, onMessage);
      await f.broker.publish(f.queue, { a: 1 }, { messageId: 'low-1' });
      await f.broker.publish(f.queue, { a: 1 }, { messageId: 'low-1' });
      await f.broker.publish(f.queue, { a: 2 }, { messageId: 'poison' });
      await f.recorder.waitForCount(3);
      await channel.cancel(consumerTag);
      expect(await onMessage.drain(5000)).toBe(0);
      await channel.close();
      expect(events.sort()).toEqual(['dead_letter:poison', 'duplicate:low-1']);
      expect(await f.t.countEffects()).toBe(1);
      expect(await f.broker.depth(f.queue)).toBe(0);
      expect(await f.broker.depth(`${f.queue}.dead-letter`)).toBe(1);
    } finally {
      await connection.close();
    }
  });

  it('needs a confirm channel to publish retry and dead-letter copies', async () => {
    const connection = await amqp.connect(amqpUrl());
    try {
      const channel = await connection.createChannel();
      expect(() => createAmqpMessageHandler(channel, f.processor(), { queue: f.queue })).toThrow(/confirm channel/);
    } finally {
      await connection.close();
    }
  });

  it('an unroutable dead-letter copy is never acked: the original is requeued, not lost', async () => {
    const consumer = f.consume({
      handler: f.processor(() => {
        throw new PermanentError('bad');
      }),
      deadLetter: { queue: uniqueName('missing_dlq') },
      assertTopology: false,
      requeueDelayMs: 100,
    });
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    await consumer.start();
    await f.broker.publish(f.queue, { a: 1 }, { messageId: 'kept-1' });
    await waitFor('an unroutable report', () => errors.some((e) => isInboxError(e.cause) && e.cause.code === 'AMQP_UNROUTABLE'), 20_000);
    await consumer.stop();
    expect(errors[0]!.code).toBe('AMQP_PUBLISH_FAILED');
    expect(errors[0]!.messageIds).toEqual(['kept-1']);
    // Still in the work queue, nothing committed.
    expect(await f.broker.depth(f.queue)).toBe(1);
    expect(await f.t.countEffects()).toBe(0);
  });
});

describe('retry copies and the attempt header', () => {
  let f: AmqpFixture;
  beforeEach(async () => {
    f = await createAmqpFixture('amqp_attempt');
  });
  afterEach(async () => {
    await f.close();
  });

  it('a database outage retry keeps the attempt; a handler failure advances it', async () => {
    const connection = await amqp.connect(amqpUrl());
    try {
      const channel = await connection.createConfirmChannel();
      // Long tiers so the copies stay in the retry queue where the test can read them.
      await assertAmqpTopology(channel, { queue: f.queue, retryDelaysMs: [60_000] });
      const reasons = ['database-unavailable', 'handler-failed'];
      let call = 0;
      const processor = Object.assign(
        async (m: { id: string; attempt?: number }) => ({
          status: 'retry' as const,
          messageId: m.id,
          consumer: 'c',
          reason: reasons[call]!,
          attempt: m.attempt ?? 1,
          retryAfterMs: 10,
          error: new InboxError(reasons[call++] === 'handler-failed' ? 'HANDLER_FAILED' : 'DATABASE_UNAVAILABLE', 'simulated'),
        }),
        { kind: 'single' as const, consumer: 'c', checkTables: async () => {} },
      );
      const onMessage = createAmqpMessageHandler(channel, processor, { queue: f.queue, retryDelaysMs: [60_000] });
      const { consumerTag } = await channel.consume(f.queue, onMessage);
      await f.broker.publish(f.queue, { a: 1 }, { messageId: 'outage', headers: { 'x-inboxed-attempt': 2 } });
      await waitFor('first copy', async () => (await f.broker.depth(`${f.queue}.retry.60000`)) === 1);
      await f.broker.publish(f.queue, { a: 2 }, { messageId: 'failing', headers: { 'x-inboxed-attempt': 2 } });
      await waitFor('second copy', async () => (await f.broker.depth(`${f.queue}.retry.60000`)) === 2);
      await channel.cancel(consumerTag);
      await onMessage.drain(5000);
      const copies = await f.broker.drain(`${f.queue}.retry.60000`);
      const attemptOf = (id: string) => copies.find((c) => c.properties.messageId === id)!.properties.headers!['x-inboxed-attempt'];
      expect(attemptOf('outage')).toBe(2); // delivered as attempt 3, not counted: stays at 2
      expect(attemptOf('failing')).toBe(3); // attempt 3 failed: the next delivery is attempt 4
      expect(copies[0]!.properties.headers!['x-inboxed-original-queue']).toBe(f.queue);
      expect(await f.broker.depth(f.queue)).toBe(0);
    } finally {
      await connection.close();
    }
  });
});
