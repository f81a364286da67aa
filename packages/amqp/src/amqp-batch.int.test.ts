import { DeadLetterHeaders, PermanentError } from '@inboxed/core';
import { waitFor } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createAmqpFixture, type AmqpFixture } from '../test/amqp-fixture.js';

describe('createAmqpConsumer in batch mode (withInboxBatch)', () => {
  let f: AmqpFixture;
  beforeEach(async () => {
    f = await createAmqpFixture('amqp_batch');
  });
  afterEach(async () => {
    await f.close();
  });

  const publishMany = async (ids: string[]) => {
    for (const id of ids)
      f.broker.channel.sendToQueue(f.queue, Buffer.from(JSON.stringify({ id })), { messageId: id, contentType: 'application/json', persistent: true });
    await f.broker.channel.waitForConfirms();
  };

  it('a poison message in a batch is dead-lettered alone; its neighbours commit once; duplicates are acked', async () => {
    const batchSizes: number[] = [];
    const handler = f.batchProcessor((message) => {
      if (message.id === 'b-13') throw new PermanentError('poison');
    });
    const counting = Object.assign(
      async (messages: Parameters<typeof handler>[0]) => {
        batchSizes.push(messages.length);
        return handler(messages);
      },
      { kind: 'batch' as const, consumer: handler.consumer, checkTables: () => handler.checkTables() },
    );
    const consumer = f.consume({ handler: counting, batch: { size: 10, waitMs: 100 } });
    await consumer.start();
    const ids = Array.from({ length: 30 }, (_, i) => `b-${i}`);
    await publishMany([...ids, 'b-1', 'b-2']); // two redeliveries-by-producer
    await f.recorder.waitForCount(32, () => true, 20_000);
    await waitFor('dead letter', async () => (await f.broker.depth(`${f.queue}.dead-letter`)) === 1);
    await consumer.stop();

    expect(f.recorder.counts()).toEqual({ processed: 29, duplicate: 2, 'dead-letter': 1 });
    const perMessage = await f.effectsPerMessage();
    expect(perMessage.size).toBe(29);
    expect(perMessage.has('b-13')).toBe(false);
    expect([...perMessage.values()].every((n) => n === 1)).toBe(true);
    const [dead] = await f.broker.drain(`${f.queue}.dead-letter`);
    expect(dead!.properties.messageId).toBe('b-13');
    expect(dead!.properties.headers![DeadLetterHeaders.REASON]).toBe('permanent-failure');
    expect(await f.broker.depth(f.queue)).toBe(0);
    // Deliveries were collected into batches (at most `size`), not processed one by one.
    expect(Math.max(...batchSizes)).toBeLessThanOrEqual(10);
    expect(batchSizes.length).toBeLessThan(32);
  });

  it('a partial batch is processed after waitMs, and unparseable bodies are dead-lettered without joining the batch', async () => {
    const consumer = f.consume({ handler: f.batchProcessor(), batch: { size: 50, waitMs: 50 } });
    await consumer.start();
    await publishMany(['p-1', 'p-2', 'p-3']);
    await f.broker.publish(f.queue, Buffer.from('not json'), { messageId: 'p-bad', contentType: 'application/json' });
    await f.recorder.waitForCount(3, (o) => o.status === 'processed');
    await waitFor('dead letter', async () => (await f.broker.depth(`${f.queue}.dead-letter`)) === 1);
    await consumer.stop();
    expect(await f.t.countEffects()).toBe(3);
    const [dead] = await f.broker.drain(`${f.queue}.dead-letter`);
    expect(dead!.properties.headers![DeadLetterHeaders.REASON]).toBe('unparseable-body');
    expect(await f.broker.depth(f.queue)).toBe(0);
  });

  it('stop() in batch mode under load: the partial batch is finished, nothing lost or doubled after restart', async () => {
    const total = 400;
    const first = f.consume({ handler: f.batchProcessor(() => new Promise<void>((r) => setTimeout(r, 1))), batch: { size: 25, waitMs: 30 } });
    await first.start();
    await publishMany(Array.from({ length: total }, (_, i) => `l-${i}`));
    await f.recorder.waitForCount(50, (o) => o.status === 'processed', 30_000);
    await first.stop();
    const committed = await f.t.countEffects();
    expect(committed).toBeLessThan(total);
    expect(f.recorder.counts().processed).toBe(committed);
    expect(await f.broker.depth(f.queue)).toBe(total - committed);

    const second = f.consume({ handler: f.batchProcessor(), batch: { size: 25, waitMs: 30 } });
    await second.start();
    await waitFor('the rest processed', async () => (await f.t.countEffects()) === total, 60_000);
    await waitFor('the queue to drain', async () => (await f.broker.depth(f.queue)) === 0, 30_000);
    await second.stop();
    const perMessage = await f.effectsPerMessage();
    expect(perMessage.size).toBe(total);
    expect([...perMessage.values()].every((n) => n === 1)).toBe(true);
    expect(f.recorder.counts()).toEqual({ processed: total });
  });
});
