import { InboxErrorCodes, PermanentError, withInbox, withInboxBatch, type InboxMessage } from '@inboxed/core';
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

  it('the same id with a different payload is a conflict: dead-lettered with reason payload-mismatch, first effect kept', async () => {
    const queue = await createQueue(ctx.client, 'conflict');
    const dlq = await createQueue(ctx.client, 'conflict-dlq');
    const recorder = createOutcomeRecorder();
    await start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(inbox()) });
    await send(ctx.client, queue.url, { amount: 10 }, { id: 'pay-1' });
    await recorder.waitFor('pay-1', { status: 'processed' });
    await send(ctx.client, queue.url, { amount: 99 }, { id: 'pay-1' });

    const [dead] = await receiveAll(ctx.client, dlq.url, 1);
    await waitFor('source queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(dead!.Body).toBe(JSON.stringify({ amount: 99 }));
    expect(dead!.MessageAttributes!['x-inboxed-reason']?.StringValue).toBe('payload-mismatch');
    expect(dead!.MessageAttributes!['x-inboxed-error-code']?.StringValue).toBe('PAYLOAD_MISMATCH');
    expect(recorder.counts()).toEqual({ processed: 1, conflict: 1 });
    expect(await ctx.t.query(`select value from "${ctx.t.schema}".effects`)).toEqual([{ value: { amount: 10 } }]);
  });

  it('with sqsMessageIdFallback: false a message without the id attribute is dead-lettered as missing-message-id', async () => {
    const queue = await createQueue(ctx.client, 'noid');
    const dlq = await createQueue(ctx.client, 'noid-dlq');
    await send(ctx.client, queue.url, { to: 'ada' });
    await start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: inbox(), sqsMessageIdFallback: false });

    const [dead] = await receiveAll(ctx.client, dlq.url, 1);
    await waitFor('source queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(dead!.MessageAttributes!['x-inboxed-reason']?.StringValue).toBe('missing-message-id');
    expect(dead!.MessageAttributes!['message-id']).toBeUndefined();
    expect(await ctx.t.countEffects()).toBe(0);
  });

  it('without the id attribute the SQS MessageId is the id, and an extractor can read the id from the body instead', async () => {
    const queue = await createQueue(ctx.client, 'ids');
    const dlq = await createQueue(ctx.client, 'ids-dlq');
    const sqsId = await send(ctx.client, queue.url, { ref: 'a' });
    const recorder = createOutcomeRecorder();
    await start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(inbox()) });
    await recorder.waitFor(sqsId, { status: 'processed' });

    const other = await createQueue(ctx.client, 'ids-body');
    await send(ctx.client, other.url, { ref: 'order-7' });
    await send(ctx.client, other.url, { ref: 'order-7' });
    await start({
      queueUrl: other.url,
      deadLetterQueueUrl: dlq.url,
      handler: recorder.wrap(inbox()),
      extractMessageId: (message) => (JSON.parse(message.Body!) as { ref: string }).ref,
    });
    await recorder.waitForCount(2, (o) => o.messageId === 'order-7');
    expect(
      recorder.outcomes
        .filter((o) => o.messageId === 'order-7')
        .map((o) => o.status)
        .sort(),
    ).toEqual(['duplicate', 'processed']);
    expect(await ctx.t.countEffects('order-7')).toBe(1);
    await waitFor('queues empty', async () => (await queueDepth(ctx.client, queue.url)) + (await queueDepth(ctx.client, other.url)) === 0);
  });
});

describe('createSqsConsumer: misconfiguration is loud', () => {
  const ctx = sqsTestContext();

  it('start() rejects with INBOX_TABLE_MISSING when the inbox tables were never migrated; the message stays queued', async () => {
    const queue = await createQueue(ctx.client, 'unmigrated');
    await send(ctx.client, queue.url, { a: 1 }, { id: 'm-1' });
    const unmigrated = withInbox(async () => {}, { db: ctx.t.db, consumer: 'c', tables: { schema: `${ctx.t.schema}_none` } });
    await expect(ctx.start({ queueUrl: queue.url, handler: unmigrated })).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING });
    expect(ctx.consumers[0]!.status.isRunning).toBe(false);
    expect(await queueDepth(ctx.client, queue.url)).toBe(1);
  });
});
