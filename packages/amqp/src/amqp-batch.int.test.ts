import type { InboxMessage } from '@inboxed/core';
import { DeadLetterHeaders } from '@inboxed/core/adapter';
import { waitFor } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpTestKit, createAmqpTestKit } from '../test/amqp-test-kit.js';

// Batch collection and coalesced acks, RabbitMQ specifics of batch mode (poison isolation is in the
// conformance suite).
describe('createAmqpConsumer in batch mode (withInboxBatch)', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp_batch');
  });
  afterEach(async () => {
    await k.close();
  });

  it('collects deliveries into batches of at most batchSize; later copies of an id are acked as duplicates', async () => {
    const batchSizes: number[] = [];
    const handler = k.batchProcessor();
    const counting = Object.assign(
      async (messages: readonly InboxMessage[]) => {
        batchSizes.push(messages.length);
        return handler(messages);
      },
      { kind: 'batch' as const, consumer: handler.consumer, checkTables: () => handler.checkTables(), observe: handler.observe },
    );
    const consumer = k.consume(counting, { batchSize: 10, batchWaitMs: 100 });
    await consumer.start();
    const ids = Array.from({ length: 30 }, (_, i) => `b-${i}`);
    await k.h.publish([...ids, 'b-1', 'b-2'].map((id) => ({ id, payload: { id } }))); // two redeliveries-by-producer
    await k.recorder.waitForCount(32, () => true, 20_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0);
    await consumer.stop();
    expect(k.recorder.counts()).toEqual({ processed: 30, duplicate: 2 });
    expect(Math.max(...batchSizes)).toBeLessThanOrEqual(10);
    expect(batchSizes.length).toBeLessThan(32); // collected, not processed one by one
    expect([...(await k.effectsPerMessage()).values()].every((n) => n === 1)).toBe(true);
  });

  it('a partial batch is processed after batchWaitMs; an unparseable body is dead-lettered without joining the batch', async () => {
    const consumer = k.consume(k.batchProcessor(), { batchSize: 50, batchWaitMs: 50 });
    await consumer.start();
    await k.h.publish(['p-1', 'p-2', 'p-3'].map((id) => ({ id, payload: { id } })));
    await k.h.publishRaw(Buffer.from('not json'), { messageId: 'p-bad', contentType: 'application/json' });
    await k.recorder.waitForCount(3, (o) => o.status === 'processed');
    await waitFor('the dead letter', async () => (await k.h.depth(k.h.deadLetterQueue)) === 1);
    await consumer.stop();
    expect(await k.t.countEffects()).toBe(3);
    const [dead] = await k.h.drain(k.h.deadLetterQueue);
    expect(dead!.properties.headers![DeadLetterHeaders.REASON]).toBe('unparseable-body');
    expect(await k.h.depth()).toBe(0);
  });

  it('stop() under load: coalesced acks are all sent before the channels close; exactly the uncommitted rest stays queued', async () => {
    const total = 400;
    const first = k.consume(
      k.batchProcessor(() => new Promise<void>((r) => setTimeout(r, 1))),
      { batchSize: 25, batchWaitMs: 30 },
    );
    await first.start();
    await k.h.publish(Array.from({ length: total }, (_, i) => ({ id: `l-${i}`, payload: { i } })));
    await k.recorder.waitForCount(50, (o) => o.status === 'processed', 30_000);
    // In flight counts deliveries (collected ones too), bounded by the prefetch of 4 * batchSize.
    const inFlight = await waitFor('deliveries in flight', () => first.status().inFlight);
    expect(inFlight).toBeLessThanOrEqual(100);
    await first.stop();
    expect(first.status().inFlight).toBe(0);
    // Everything committed was acked, everything else is back in the queue: nothing in between.
    const committed = await k.t.countEffects();
    expect(committed).toBeLessThan(total);
    expect(k.recorder.counts().processed).toBe(committed);
    expect(await k.h.pending()).toBe(total - committed);

    const second = k.consume(k.batchProcessor(), { batchSize: 25, batchWaitMs: 30 });
    await second.start();
    await waitFor('the rest processed', async () => (await k.t.countEffects()) === total, 60_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 30_000);
    await second.stop();
    const perMessage = await k.effectsPerMessage();
    expect(perMessage.size).toBe(total);
    expect([...perMessage.values()].every((n) => n === 1)).toBe(true);
    expect(k.recorder.counts()).toEqual({ processed: total });
  });
});
