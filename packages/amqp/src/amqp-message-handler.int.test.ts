import { PermanentError, isInboxError, type InboxError } from '@inboxed/core';
import { uniqueName, waitFor } from '@inboxed/test-support';
import amqp from 'amqplib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createAmqpFixture, type AmqpFixture } from '../test/amqp-fixture.js';
import { amqpUrl } from '../test/amqp-test-broker.js';
import { createAmqpMessageHandler } from './amqp-message-handler.js';
import { assertTopology, resolveTopology } from './amqp-topology.js';

describe('createAmqpMessageHandler in a hand-written channel.consume loop', () => {
  let f: AmqpFixture;
  beforeEach(async () => {
    f = await createAmqpFixture('amqp_low');
  });
  afterEach(async () => {
    await f.close();
  });

  it('processes, dedups and dead-letters on the caller\'s own confirm channel', async () => {
    const connection = await amqp.connect(amqpUrl());
    try {
      const channel = await connection.createConfirmChannel();
      await assertTopology(channel, resolveTopology(f.queue, [300], undefined), undefined);
      await channel.prefetch(10);
      const onMessage = createAmqpMessageHandler(channel, f.processor((m) => {
        if (m.id === 'poison') throw new PermanentError('bad order');
      }), { queue: f.queue, retryDelaysMs: [300] });
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
      handler: f.processor(() => { throw new PermanentError('bad'); }),
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
