import { type Message, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { type InboxMessage, type InboxOutcome, type InboxProcessor, OutcomeReasons, wrapProcessor } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { sqsTestContext } from '../test/sqs-test-kit.js';
import { createSqsHandler } from './index.js';

/**
 * Leased mode's `busy` ("another worker holds the lease: not now"), produced here by a middleware in
 * front of a real `withInbox` processor: the first `times` deliveries of each id in `ids` come back
 * `busy` without reaching the inbox, later ones run it.
 */
function busyAtFirst(processor: InboxProcessor, ids: readonly string[], times: number, retryAfterMs: number) {
  const seen = new Map<string, number>();
  const calls: Array<{ id: string; at: number }> = [];
  const wrapped = wrapProcessor(processor, async (message: InboxMessage, next): Promise<InboxOutcome> => {
    calls.push({ id: message.id, at: Date.now() });
    const n = (seen.get(message.id) ?? 0) + 1;
    seen.set(message.id, n);
    if (ids.includes(message.id) && n <= times) {
      return {
        status: 'busy',
        reason: OutcomeReasons.LEASE_HELD,
        retryAfterMs,
        messageId: message.id,
        consumer: processor.consumer,
        attempt: message.attempt ?? 1,
      };
    }
    return next(message);
  });
  return { processor: wrapped, calls };
}

describe('busy outcomes (leased mode) on a real SQS API', () => {
  const ctx = sqsTestContext();

  it('busy twice, then processed: never deleted or dead-lettered while busy, invisible for retryAfterMs, `busy` events (not `retry`)', async () => {
    // A 30 s visibility timeout: the message comes back after about 1 s only if its visibility was set to retryAfterMs.
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '30' } });
    await h.send({ to: 'ada' }, { id: 'lease-1' });
    const recorder = createOutcomeRecorder();
    const { processor, calls } = busyAtFirst(ctx.inbox(), ['lease-1'], 2, 1000);
    const consumer = await ctx.start(h, { handler: recorder.wrap(processor), concurrency: 2 });
    const busy: InboxOutcome[] = [];
    const retries: InboxOutcome[] = [];
    consumer.on('busy', (outcome) => busy.push(outcome));
    consumer.on('retry', (outcome) => retries.push(outcome));

    await recorder.waitFor('lease-1', { status: 'processed', timeoutMs: 20_000 });
    await waitFor('queue empty', async () => (await h.pending()) === 0);

    // Not deleted while busy: the processor saw the message three times.
    expect(calls.map((c) => c.id)).toEqual(['lease-1', 'lease-1', 'lease-1']);
    expect(recorder.outcomes.map((o) => o.status)).toEqual(['busy', 'busy', 'processed']);
    expect(busy.map((o) => [o.status, o.reason, o.retryAfterMs])).toEqual([
      ['busy', 'lease-held', 1000],
      ['busy', 'lease-held', 1000],
    ]);
    expect(retries).toEqual([]);
    // Each busy receive kept the message invisible for about retryAfterMs: not released at once, not left for the 30 s timeout.
    const gaps = [calls[1]!.at - calls[0]!.at, calls[2]!.at - calls[1]!.at];
    for (const gap of gaps) {
      expect(gap).toBeGreaterThanOrEqual(900);
      expect(gap).toBeLessThan(10_000);
    }
    expect(await ctx.t.countEffects('lease-1')).toBe(1);
    expect(await h.deadLetterMessages()).toEqual([]);
    expect(await h.pending()).toBe(0); // the queue's own attributes: nothing visible, in flight or delayed
    expect(ctx.errors).toEqual([]);
  });

  it('createSqsHandler: a busy message gets its own retryAfterMs as visibility (at least 1 s), whatever its receive count, and holds back its FIFO group', async () => {
    // fauxqs hands out one message per FIFO group at a time; as in sqs-fifo.int.test.ts, real
    // deliveries of a standard queue are tagged with a group to reproduce one receive holding two of a group.
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '30' } });
    for (const id of ['g1', 'g2', 'h1', 'z1']) await h.send({ id }, { id });
    const received: Message[] = [];
    while (received.length < 4) {
      const { Messages = [] } = await h.client.send(
        new ReceiveMessageCommand({ QueueUrl: h.queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }),
      );
      received.push(...Messages);
    }
    const idOf = (m: Message) => m.MessageAttributes!['message-id']!.StringValue!;
    received.sort((a, b) => idOf(a).localeCompare(idOf(b)));
    for (const message of received) {
      message.Attributes!.MessageGroupId = idOf(message).slice(0, 1);
      // A high receive count: a receive-count backoff would be minutes, a busy one stays retryAfterMs.
      message.Attributes!.ApproximateReceiveCount = '9';
    }

    const seen: string[] = [];
    const inner = ctx.inbox();
    const processor = wrapProcessor(inner, async (message, next): Promise<InboxOutcome> => {
      seen.push(message.id);
      if (message.id === 'g1')
        return { status: 'busy', reason: OutcomeReasons.LEASE_HELD, retryAfterMs: 1500, messageId: message.id, consumer: inner.consumer };
      if (message.id === 'z1') return { status: 'busy', reason: OutcomeReasons.LEASE_HELD, retryAfterMs: 0, messageId: message.id, consumer: inner.consumer };
      return next(message);
    });
    const handler = createSqsHandler({
      client: h.client,
      queueUrl: h.queueUrl,
      deadLetterQueueUrl: h.deadLetterQueueUrl,
      handler: processor,
      fifo: true,
      visibilityTimeoutSeconds: 30,
      redeliveryBackoff: { baseDelayMs: 60_000, jitter: 'none' },
    });
    const busy: string[] = [];
    const retries: string[] = [];
    handler.on('busy', (outcome) => busy.push(outcome.messageId));
    handler.on('retry', (outcome) => retries.push(outcome.messageId));
    const { results, errors } = await handler.handle(received);

    expect(errors).toEqual([]);
    expect(results.map((r) => [r.messageId, r.outcome?.status, r.settlement, r.visibilityTimeoutSeconds])).toEqual([
      ['g1', 'busy', 'retry-scheduled', 2],
      ['g2', undefined, 'held-back', 2],
      ['h1', 'processed', 'deleted', undefined],
      ['z1', 'busy', 'retry-scheduled', 1],
    ]);
    expect(seen.sort()).toEqual(['g1', 'h1', 'z1']);
    expect(busy.sort()).toEqual(['g1', 'z1']);
    expect(retries).toEqual([]);
    expect(await h.deadLetterMessages()).toEqual([]);
    // g1, g2 and z1 are still in the queue and come back within seconds (not after the 30 s receive timeout).
    const again: string[] = [];
    const deadline = Date.now() + 10_000;
    while (again.length < 3 && Date.now() < deadline) {
      const { Messages = [] } = await h.client.send(
        new ReceiveMessageCommand({ QueueUrl: h.queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ['All'] }),
      );
      again.push(...Messages.map(idOf));
    }
    expect(again.sort()).toEqual(['g1', 'g2', 'z1']);
  });

  it('FIFO consumer: a busy message holds back its group in order while another group progresses', async () => {
    const h = await ctx.queues({ fifo: true });
    for (const group of ['A', 'B']) {
      for (let i = 1; i <= 2; i++) await h.send({ group, i }, { id: `${group}${i}`, group, dedup: `${group}${i}` });
    }
    const recorder = createOutcomeRecorder();
    const { processor, calls } = busyAtFirst(ctx.inbox(), ['A1'], 2, 1000);
    await ctx.start(h, { handler: recorder.wrap(processor), concurrency: 2 });

    await recorder.waitFor('A2', { status: 'processed', timeoutMs: 20_000 });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    const order = (await ctx.t.query<{ message_id: string }>(`select message_id from "${ctx.t.schema}".effects order by id`)).map((r) => r.message_id);
    expect(order.filter((id) => id.startsWith('A'))).toEqual(['A1', 'A2']);
    expect(order.filter((id) => id.startsWith('B'))).toEqual(['B1', 'B2']);
    // Group B did not wait for A1's lease.
    expect(order.indexOf('B2')).toBeLessThan(order.indexOf('A1'));
    // A2 never ran before A1 was done.
    expect(calls.map((c) => c.id).filter((id) => id.startsWith('A'))).toEqual(['A1', 'A1', 'A1', 'A2']);
    expect(recorder.counts()).toEqual({ busy: 2, processed: 4 });
    expect(await h.deadLetterMessages()).toEqual([]);
  });
});
