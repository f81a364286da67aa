import { InboxErrorCodes, type InboxMessage, PermanentError, withInbox, withInboxBatch } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { sleep } from '@inboxed/core/adapter';
import { deadLettersOf, queueDepth, sqsClient, sqsTestContext } from '../test/sqs-test-kit.js';
import { SqsErrorCodes } from './index.js';

// SQS-specific consumer behaviour; what every adapter does alike is in conformance.int.test.ts.
describe('createSqsConsumer against a real SQS API and PostgreSQL', () => {
  const ctx = sqsTestContext();

  it('batchSize bounds the messages per batch-processor call; copies across receives and pollers still apply once', async () => {
    const h = await ctx.queues();
    for (let i = 0; i < 25; i++) await h.send({ n: i % 10 }, { id: `n-${i % 10}` });
    const recorder = createOutcomeRecorder();
    const calls: number[] = [];
    const processor = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        await tx.insert(ctx.t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
      },
      { db: ctx.t.db, consumer: 'notifications', tables: { schema: ctx.t.schema } },
    );
    const counting = Object.assign(
      async (messages: readonly InboxMessage[], options?: { signal?: AbortSignal }) => {
        calls.push(messages.length);
        return processor(messages, options);
      },
      { kind: 'batch' as const, consumer: processor.consumer, checkTables: () => processor.checkTables(), observe: processor.observe },
    );
    await ctx.start(h, { handler: recorder.wrap(counting), concurrency: 2, batchSize: 3 });

    await recorder.waitForCount(25);
    await waitFor('queue empty', async () => (await queueDepth(h.client, h.queueUrl)) === 0);
    expect(recorder.counts()).toEqual({ processed: 10, duplicate: 15 });
    expect(await ctx.t.countEffects()).toBe(10);
    expect(Math.max(...calls)).toBeLessThanOrEqual(3);
  });

  it('a dead-letter keeps SQS limits: the id attribute and reason first, at most 10 attributes, the rest packed as JSON; the event names the DLQ', async () => {
    const h = await ctx.queues();
    await h.send({ to: 'nobody' }, { id: 'bad-1', attributes: { tenant: { DataType: 'String', StringValue: 'acme' } } });
    const deadLetters: Array<[string, string]> = [];
    const consumer = await ctx.start(h, {
      handler: ctx.inbox(() => {
        throw new PermanentError('no such recipient');
      }),
    });
    consumer.on('dead_letter', (outcome, destination) => deadLetters.push([outcome.messageId, destination]));

    const [dead] = await deadLettersOf(h);
    await waitFor('source queue empty', async () => (await h.pending()) === 0);
    expect(dead!.Body).toBe(JSON.stringify({ to: 'nobody' }));
    const attributes = dead!.MessageAttributes!;
    expect(attributes['message-id']?.StringValue).toBe('bad-1');
    expect(attributes['x-inboxed-reason']?.StringValue).toBe('permanent-failure');
    expect(attributes['x-inboxed-error']?.StringValue).toContain('no such recipient');
    expect(Object.keys(attributes).length).toBeLessThanOrEqual(10);
    const overflow = JSON.parse(attributes['x-inboxed-overflow']!.StringValue!) as Record<string, { value: string }>;
    expect(overflow.tenant?.value).toBe('acme');
    expect(overflow['x-inboxed-source-queue']?.value).toBe(h.queueUrl);
    await waitFor('dead_letter event', () => deadLetters.length === 1);
    expect(deadLetters).toEqual([['bad-1', h.deadLetterQueueUrl]]);
    expect(await ctx.t.countEffects()).toBe(0);
  });

  it('messageId: fallback uses the SQS MessageId; extract reads the id from the body; an extract that throws dead-letters as missing-message-id', async () => {
    const h = await ctx.queues();
    const sqsId = await h.send({ ref: 'a' });
    const recorder = createOutcomeRecorder();
    await ctx.start(h, { handler: recorder.wrap(ctx.inbox()), messageId: { fallback: true } });
    await recorder.waitFor(sqsId, { status: 'processed' });

    const other = await ctx.queues();
    await other.send({ ref: 'order-7' });
    await other.send({ ref: 'order-7' });
    await other.send({ noRef: true }, { id: 'attribute-ignored' });
    await ctx.start(other, {
      handler: recorder.wrap(ctx.inbox()),
      messageId: {
        extract: (message) => {
          const { ref } = JSON.parse(message.Body!) as { ref?: string };
          if (ref === undefined) throw new Error('no ref in the body');
          return ref;
        },
      },
    });
    await recorder.waitForCount(2, (o) => o.messageId === 'order-7');
    expect(
      recorder.outcomes
        .filter((o) => o.messageId === 'order-7')
        .map((o) => o.status)
        .sort(),
    ).toEqual(['duplicate', 'processed']);
    const [dead] = await deadLettersOf(other);
    expect(dead!.MessageAttributes!['x-inboxed-reason']?.StringValue).toBe('missing-message-id');
    expect(dead!.MessageAttributes!['x-inboxed-error']?.StringValue).toContain('messageId.extract threw: Error: no ref in the body');
    expect(await ctx.t.countEffects('order-7')).toBe(1);
    await waitFor('queues empty', async () => (await h.pending()) + (await other.pending()) === 0);
  });

  it('start() reports a redrive maxReceiveCount too low for inboxed to decide first (SQS_REDRIVE_RECEIVE_COUNT_LOW) and consumes anyway', async () => {
    const low = await ctx.queues({ deadLetter: { redrive: { maxReceiveCount: 3 } } });
    await low.send({ to: 'ada' }, { id: 'low-1' });
    const recorder = createOutcomeRecorder();
    const consumer = await ctx.start(low, { handler: recorder.wrap(ctx.inbox()) });
    expect(consumer.status()).toMatchObject({ state: 'running', consuming: true });
    expect(ctx.errors.map((e) => e.code)).toEqual([SqsErrorCodes.REDRIVE_RECEIVE_COUNT_LOW]);
    expect(ctx.errors[0]!.details).toMatchObject({ queueUrl: low.queueUrl, maxReceiveCount: 3, recommendedMaxReceiveCount: 10 });
    expect(ctx.errors[0]!.message).toContain('after 3 receives');
    await recorder.waitFor('low-1', { status: 'processed' });
    await waitFor('queue empty', async () => (await low.pending()) === 0);
    expect(await ctx.t.countEffects('low-1')).toBe(1);

    // The processor's maxAttempts (withInbox exposes it) sets the bar at twice it; a high enough count raises nothing.
    ctx.errors.length = 0;
    const twelve = await ctx.queues({ deadLetter: { redrive: { maxReceiveCount: 12 } } });
    await ctx.start(twelve, { handler: ctx.inbox() });
    expect(ctx.errors).toEqual([]);
    await ctx.start(twelve, { handler: ctx.inbox(undefined, { maxAttempts: 8 }) });
    expect(ctx.errors.map((e) => [e.code, e.details?.maxAttempts, e.details?.recommendedMaxReceiveCount])).toEqual([
      [SqsErrorCodes.REDRIVE_RECEIVE_COUNT_LOW, 8, 16],
    ]);
  });

  it('waitTimeSeconds 0 on an empty queue pauses between receives instead of spinning; a message sent then is still taken at once', async () => {
    const h = await ctx.queues();
    const client = sqsClient(h.endpoint);
    let receives = 0;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'ReceiveMessageCommand') receives++;
        return next(args);
      },
      { step: 'initialize', name: 'countReceives' },
    );
    try {
      const recorder = createOutcomeRecorder();
      await ctx.start(h, { handler: recorder.wrap(ctx.inbox()), waitTimeSeconds: 0 }, client);
      const before = receives;
      await sleep(2000);
      const perSecond = (receives - before) / 2;
      expect(perSecond).toBeGreaterThan(1); // it keeps polling...
      expect(perSecond).toBeLessThanOrEqual(6); // ...about 5 a second (a 200 ms pause), not ~1000
      const sentAt = Date.now();
      await h.send({ to: 'ada' }, { id: 'short-poll' });
      await recorder.waitFor('short-poll', { status: 'processed' });
      expect(Date.now() - sentAt).toBeLessThan(2000);
      await waitFor('queue empty', async () => (await h.pending()) === 0);
      expect(ctx.errors).toEqual([]);
    } finally {
      await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
      client.destroy();
    }
  });

  it('start() rejects with INBOX_TABLE_MISSING when the inbox tables were never migrated; the consumer is stopped, the message stays queued', async () => {
    const h = await ctx.queues();
    await h.send({ a: 1 }, { id: 'm-1' });
    const unmigrated = withInbox(async () => {}, { db: ctx.t.db, consumer: 'c', tables: { schema: `${ctx.t.schema}_none` } });
    await expect(ctx.start(h, { handler: unmigrated })).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING });
    expect(ctx.consumers[0]!.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false });
    expect(await h.pending()).toBe(1);
  });
});
