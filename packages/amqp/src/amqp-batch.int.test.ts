import { OutcomeReasons, wrapProcessor, withInboxBatch, type InboxMessage, type InboxOutcome } from '@inboxed/core';
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

  it('stop() requeues a partial batch unprocessed: no handler starts after the stop, nothing is counted or lost', async () => {
    let calls = 0;
    const consumer = k.consume(
      k.batchProcessor(() => {
        calls++;
      }),
      { batchSize: 50, batchWaitMs: 60_000 },
    );
    await consumer.start();
    await k.h.publish(['s-1', 's-2', 's-3'].map((id) => ({ id, payload: { id } })));
    await waitFor('the partial batch collected', async () => consumer.status().inFlight === 3);
    await consumer.stop();
    // Before, stop() processed it with the handler's signal already fired, where a failure is not counted.
    expect(calls).toBe(0);
    expect(await k.h.depth()).toBe(3);
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
    expect(await k.t.query(`select count(*)::int as n from "${k.t.schema}".inbox_attempts`)).toEqual([{ n: 0 }]);
    const next = k.consume(k.batchProcessor(), { batchSize: 50, batchWaitMs: 50 });
    await next.start();
    await k.recorder.waitForCount(3, (o) => o.status === 'processed');
    await waitFor('everything settled', async () => (await k.h.pending()) === 0);
    await next.stop();
    expect([...(await k.effectsPerMessage()).values()]).toEqual([1, 1, 1]);
  });

  it('a busy id in a batch is delayed alone (attempt kept, busy event) while the rest of the batch is processed', async () => {
    const inner = withInboxBatch(
      async (messages, tx: any) => {
        await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
      },
      { db: k.t.db, consumer: k.consumerName, tables: { schema: k.t.schema } },
    );
    const leased: (number | undefined)[] = [];
    // 'z-leased' is busy (held by another worker) on its first two deliveries; the others go through.
    const processor = k.recorder.wrap(
      wrapProcessor(inner, async (messages, next) => {
        const busy = new Map<InboxMessage, InboxOutcome>();
        for (const m of messages) {
          if (m.id !== 'z-leased') continue;
          leased.push(m.attempt);
          if (leased.length <= 2) {
            busy.set(m, {
              status: 'busy',
              reason: OutcomeReasons.LEASE_HELD,
              retryAfterMs: 200,
              messageId: m.id,
              consumer: inner.consumer,
              attempt: m.attempt ?? 1,
            });
          }
        }
        const rest = messages.filter((m) => !busy.has(m));
        const outcomes = rest.length === 0 ? [] : await next(rest);
        return messages.map((m) => busy.get(m) ?? outcomes[rest.indexOf(m)]!);
      }),
    );
    const consumer = k.consume(processor, { batchSize: 10, batchWaitMs: 50 });
    const events: string[] = [];
    consumer.on('busy', (o) => events.push(`busy:${o.messageId}`));
    consumer.on('retry', (o) => events.push(`retry:${o.messageId}`));
    consumer.on('dead_letter', (o) => events.push(`dead_letter:${o.messageId}`));
    await consumer.start();
    await k.h.publish(['a-1', 'z-leased', 'a-2', 'a-3'].map((id) => ({ id, payload: { id } })));
    await k.recorder.waitFor('z-leased', { status: 'processed', timeoutMs: 20_000 });
    await waitFor('everything settled', async () => (await k.h.pending()) === 0);
    await consumer.stop();
    expect(events).toEqual(['busy:z-leased', 'busy:z-leased']);
    expect(k.recorder.counts()).toEqual({ busy: 2, processed: 4 });
    expect(leased).toEqual([1, 1, 1]);
    expect(await k.effectsPerMessage()).toEqual(new Map(['a-1', 'z-leased', 'a-2', 'a-3'].map((id) => [id, 1])));
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
  });

  it('the server closes the connection while batches settle: no coalesced ack is lost or counted twice; each effect commits once', async () => {
    const total = 600;
    const consumer = k.consume(
      k.batchProcessor(() => new Promise<void>((r) => setTimeout(r, 2))),
      { batchSize: 50, batchWaitMs: 20, connectionName: `${k.h.queue}-conn` },
    );
    consumer.on('error', () => {}); // the lost connection is reported; this test reads the outcome
    const reconnected = new Promise<void>((resolve) => consumer.on('reconnect', () => resolve()));
    await consumer.start();
    await k.h.publish(Array.from({ length: total }, (_, i) => ({ id: `c-${i}`, payload: { i } })));
    await k.recorder.waitForCount(100, (o) => o.status === 'processed', 30_000);
    expect(await k.h.closeConnectionsNamed(`${k.h.queue}-conn`)).toBe(1);
    await reconnected;
    await waitFor('every effect committed', async () => (await k.t.countEffects()) === total, 60_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 30_000);
    await consumer.stop();
    // The database, not the events, says what happened: one effect per message, none missing.
    const perMessage = await k.effectsPerMessage();
    expect(perMessage.size).toBe(total);
    expect([...perMessage.values()].every((n) => n === 1)).toBe(true);
    // Every delivery ended somewhere: processed once; a copy whose ack was lost with the channel came
    // back as a duplicate, never as a second effect.
    const counts = k.recorder.counts();
    expect(counts.processed).toBe(total);
    expect(Object.keys(counts).every((status) => status === 'processed' || status === 'duplicate')).toBe(true);
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
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

  it('a delivery settled behind a batch still in its transaction is acked at once: a connection loss then gives no second dead-letter copy', async () => {
    const name = `${k.h.queue}-behind`;
    let slow = true;
    const consumer = k.consume(
      k.batchProcessor(async () => {
        if (slow) await new Promise((resolve) => setTimeout(resolve, 3000));
      }),
      { connectionName: name, batchSize: 10, batchWaitMs: 20 },
    );
    const dead: string[] = [];
    consumer.on('dead_letter', (o) => dead.push(o.messageId));
    await consumer.start();
    await k.h.publish([{ id: 'slow-1', payload: { a: 1 } }]);
    await waitFor("slow-1's batch in its transaction", () => consumer.status().inFlight === 1, 5000);
    await k.h.publishRaw(Buffer.from('not json'), { messageId: 'bad-1', contentType: 'application/json' });
    await waitFor('bad-1 dead-lettered', () => dead.includes('bad-1'), 5000);
    // The event said settled: bad-1 must be acked by now, so a connection loss cannot bring it back.
    expect(await k.h.closeConnectionsNamed(name)).toBe(1);
    slow = false;
    await waitFor('slow-1 processed', async () => (await k.t.countEffects('slow-1')) === 1, 20_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 20_000);
    await consumer.stop();

    const copies = (await k.h.drain(k.h.deadLetterQueue)).map((d) => d.properties.messageId);
    expect(copies).toEqual(['bad-1']);
    expect(dead.filter((id) => id === 'bad-1')).toHaveLength(1);
    const rows = await k.t.query<{ n: number }>(`select count(*)::int as n from "${k.t.schema}".inbox_dead_letters where message_id = 'bad-1'`);
    expect(rows[0]!.n).toBe(1);
  });
});
