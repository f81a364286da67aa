import type { InboxMessage } from '@inboxed/core';
import { sleep } from '@inboxed/core/adapter';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { sqsTestContext } from '../test/sqs-test-kit.js';

describe('visibility: heartbeats, stale receipt handles and retry backoff on a real SQS API', () => {
  const ctx = sqsTestContext();

  it('a handler slower than the visibility timeout is kept invisible by heartbeats: no second copy, one effect', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '2' } });
    await h.send({ report: 'monthly' }, { id: 'slow-1' });
    const calls: number[] = [];
    const recorder = createOutcomeRecorder();
    const handler = ctx.inbox(async (message: InboxMessage, tx: any) => {
      calls.push(message.attempt ?? 0);
      await sleep(5_000); // 2.5 visibility timeouts
      await ctx.insertEffect(message, tx);
    });
    // Three pollers: any of them would receive the message if its visibility lapsed.
    await ctx.start(h, { handler: recorder.wrap(handler), concurrency: 3, visibilityTimeoutSeconds: 2 });

    await recorder.waitFor('slow-1', { status: 'processed', timeoutMs: 15_000 });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(calls).toEqual([1]); // one delivery, first receive
    expect(recorder.counts()).toEqual({ processed: 1 });
    expect(await ctx.t.countEffects('slow-1')).toBe(1);
    expect(ctx.errors).toEqual([]);
  });

  it('without heartbeats the copy redelivered mid-handler is a duplicate; the stale receipt handle does not lose or double it', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '1' } });
    await h.send({ report: 'weekly' }, { id: 'slow-2' });
    let calls = 0;
    const recorder = createOutcomeRecorder();
    const handler = ctx.inbox(async (message: InboxMessage, tx: any) => {
      calls++;
      await ctx.insertEffect(message, tx);
      await sleep(2_500); // the message reappears while this transaction holds the inbox row
    });
    await ctx.start(h, {
      handler: recorder.wrap(handler),
      concurrency: 2,
      visibilityTimeoutSeconds: 1,
      heartbeatIntervalMs: 0,
    });

    await recorder.waitForCount(2, undefined, 15_000);
    // The first copy's delete used a receipt handle SQS had replaced (a silent no-op on SQS);
    // the second copy, a duplicate, deletes with the current one.
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    // One copy per lapsed visibility timeout (one or two in 2.5 s), each acked as a duplicate.
    expect(recorder.counts().processed).toBe(1);
    expect(recorder.counts().duplicate).toBeGreaterThanOrEqual(1);
    expect(calls).toBe(1);
    expect(await ctx.t.countEffects('slow-2')).toBe(1);
  });

  it('failure then success: each retry sets a longer visibility timeout, observed as growing gaps', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '30' } });
    await h.send({ to: 'ada' }, { id: 'flaky-1' });
    const seen: Array<{ at: number; attempt: number | undefined }> = [];
    const recorder = createOutcomeRecorder();
    const handler = ctx.inbox(async (message: InboxMessage, tx: any) => {
      seen.push({ at: Date.now(), attempt: message.attempt });
      if (seen.length <= 2) throw new Error('mail server unavailable');
      await ctx.insertEffect(message, tx);
    }); // core backoff: 1 s, then 2 s (no jitter)
    const retries: number[] = [];
    const consumer = await ctx.start(h, { handler: recorder.wrap(handler), concurrency: 2 });
    consumer.on('retry', (outcome) => retries.push(outcome.retryAfterMs ?? -1));

    await recorder.waitFor('flaky-1', { status: 'processed', timeoutMs: 15_000 });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(recorder.counts()).toEqual({ retry: 2, processed: 1 });
    expect(retries).toEqual([1000, 2000]);
    expect(seen.map((s) => s.attempt)).toEqual([1, 2, 3]); // ApproximateReceiveCount
    const gaps = [seen[1]!.at - seen[0]!.at, seen[2]!.at - seen[1]!.at];
    // The message stayed invisible for its backoff (not redelivered at once), and longer the second time.
    expect(gaps[0]).toBeGreaterThanOrEqual(900);
    expect(gaps[1]).toBeGreaterThanOrEqual(1900);
    expect(gaps[1]).toBeGreaterThan(gaps[0]!);
    expect(await ctx.t.countEffects('flaky-1')).toBe(1);
  });
});
