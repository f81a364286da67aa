import { PermanentError, withInboxBatch, type InboxMessage } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { createQueue, queueDepth, receiveAll, send, sqsTestContext } from './__tests__/sqs-test-kit.js';

describe('createSqsConsumer against a real SQS API and PostgreSQL', () => {
  const ctx = sqsTestContext();
  const { start, inbox } = ctx;

  it('the same message id sent 3 times: one effect, one processed and two duplicates, all deleted', async () => {
    const queue = await createQueue(ctx.client, 'dup');
    const dlq = await createQueue(ctx.client, 'dup-dlq');
    for (let i = 0; i < 3; i++) await send(ctx.client, queue.url, { to: 'ada@example.com' }, { id: 'notify-1' });
    const recorder = createOutcomeRecorder();
    await start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(inbox()) });

    await recorder.waitForCount(3);
    await waitFor('queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(recorder.counts()).toEqual({ processed: 1, duplicate: 2 });
    expect(await ctx.t.countEffects('notify-1')).toBe(1);
    expect(await queueDepth(ctx.client, dlq.url)).toBe(0);
    expect(ctx.errors).toEqual([]);
  });

  it('a batch processor writes each distinct message once and deletes all of them', async () => {
    const queue = await createQueue(ctx.client, 'batch');
    const dlq = await createQueue(ctx.client, 'batch-dlq');
    for (let i = 0; i < 25; i++) await send(ctx.client, queue.url, { n: i % 10 }, { id: `n-${i % 10}` });
    const recorder = createOutcomeRecorder();
    const processor = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        await tx.insert(ctx.t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
      },
      { db: ctx.t.db, consumer: 'notifications', tables: { schema: ctx.t.schema } },
    );
    await start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(processor), concurrency: 2 });

    await recorder.waitForCount(25);
    await waitFor('queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(recorder.counts()).toEqual({ processed: 10, duplicate: 15 });
    expect(await ctx.t.countEffects()).toBe(10);
  });

  it('a permanent failure goes to the DLQ with reason attributes and the original id, then is deleted', async () => {
    const queue = await createQueue(ctx.client, 'perm');
    const dlq = await createQueue(ctx.client, 'perm-dlq');
    await send(ctx.client, queue.url, { to: 'nobody' }, { id: 'bad-1', attributes: { tenant: { DataType: 'String', StringValue: 'acme' } } });
    const deadLetters: Array<[string, string]> = [];
    const consumer = await start({
      queueUrl: queue.url,
      deadLetterQueueUrl: dlq.url,
      handler: inbox(() => {
        throw new PermanentError('no such recipient');
      }),
    });
    consumer.on('dead_letter', (outcome, destination) => deadLetters.push([outcome.messageId, destination]));

    const [dead] = await receiveAll(ctx.client, dlq.url, 1);
    await waitFor('source queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(dead!.Body).toBe(JSON.stringify({ to: 'nobody' }));
    const attributes = dead!.MessageAttributes!;
    expect(attributes['x-inboxed-reason']?.StringValue).toBe('permanent-failure');
    expect(attributes['x-inboxed-error-code']?.StringValue).toBe('PERMANENT_FAILURE');
    expect(attributes['x-inboxed-message-id']?.StringValue).toBe('bad-1');
    expect(attributes['message-id']?.StringValue).toBe('bad-1');
    expect(attributes['x-inboxed-error']?.StringValue).toContain('no such recipient');
    expect(Object.keys(attributes).length).toBeLessThanOrEqual(10);
    // What did not fit in SQS's 10 attributes is packed into one JSON attribute, not dropped.
    const overflow = JSON.parse(attributes['x-inboxed-overflow']!.StringValue!) as Record<string, { value: string }>;
    expect(overflow.tenant?.value).toBe('acme');
    expect(overflow['x-inboxed-source-queue']?.value).toBe(queue.url);
    await waitFor('dead_letter event', () => deadLetters.length === 1);
    expect(deadLetters).toEqual([['bad-1', dlq.url]]);
    expect(await ctx.t.countEffects()).toBe(0);
  });

  it('an unparseable body is dead-lettered with reason unparseable-body without reaching the handler', async () => {
    const queue = await createQueue(ctx.client, 'garbled');
    const dlq = await createQueue(ctx.client, 'garbled-dlq');
    await send(ctx.client, queue.url, '{"to": "ada', { id: 'garbled-1' });
    let calls = 0;
    await start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: inbox(() => void calls++) });

    const [dead] = await receiveAll(ctx.client, dlq.url, 1);
    await waitFor('source queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(dead!.Body).toBe('{"to": "ada');
    expect(dead!.MessageAttributes!['x-inboxed-reason']?.StringValue).toBe('unparseable-body');
    expect(dead!.MessageAttributes!['x-inboxed-error-code']?.StringValue).toBe('UNPARSEABLE_BODY');
    expect(dead!.MessageAttributes!['message-id']?.StringValue).toBe('garbled-1');
    expect(calls).toBe(0);
  });
});
