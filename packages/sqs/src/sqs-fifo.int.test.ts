import { CreateQueueCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { type InboxMessage, PermanentError } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { waitFor } from '@inboxed/test-support';
import { startFauxqs } from 'fauxqs';
import { afterEach, describe, expect, it } from 'vitest';
import { deadLettersOf, queueDepth, sqsClient, sqsTestContext } from '../test/sqs-test-kit.js';
import { createSqsConsumer, createSqsHandler } from './index.js';

describe('FIFO queues on a real SQS API', () => {
  const ctx = sqsTestContext();
  const effectOrder = async () =>
    (await ctx.t.query<{ message_id: string }>(`select message_id from "${ctx.t.schema}".effects order by id`)).map((r) => r.message_id);

  it('keeps each group in order: a failing message holds back its own group while the other group progresses', async () => {
    const h = await ctx.queues({ fifo: true });
    for (const group of ['A', 'B']) {
      for (let i = 1; i <= 3; i++) await h.send({ group, i }, { id: `${group}${i}`, group, dedup: `${group}${i}` });
    }
    const attempts: string[] = [];
    const recorder = createOutcomeRecorder();
    const handler = ctx.inbox(async (message: InboxMessage, tx: any) => {
      attempts.push(message.id);
      if (message.id === 'A2' && attempts.filter((id) => id === 'A2').length === 1) throw new Error('template service down');
      await ctx.insertEffect(message, tx);
    });
    await ctx.start(h, { handler: recorder.wrap(handler), concurrency: 2 });

    await recorder.waitFor('A3', { status: 'processed', timeoutMs: 15_000 });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    const order = await effectOrder();
    expect(order.filter((id) => id.startsWith('A'))).toEqual(['A1', 'A2', 'A3']);
    expect(order.filter((id) => id.startsWith('B'))).toEqual(['B1', 'B2', 'B3']);
    // Group B did not wait for A2's backoff: all of B committed before A2 did.
    expect(order.indexOf('B3')).toBeLessThan(order.indexOf('A2'));
    // A3 was never attempted before A2 succeeded.
    expect(attempts.filter((id) => id.startsWith('A'))).toEqual(['A1', 'A2', 'A2', 'A3']);
    expect(recorder.counts()).toEqual({ processed: 6, retry: 1 });
  });

  it('the deduplication id is the message id when there is no id attribute (no fallback needed)', async () => {
    const h = await ctx.queues({ fifo: true });
    await h.send({ n: 1 }, { group: 'G', dedup: 'order-1' });
    const recorder = createOutcomeRecorder();
    await ctx.start(h, { handler: recorder.wrap(ctx.inbox()) });
    await recorder.waitFor('order-1', { status: 'processed' });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(await ctx.t.countEffects('order-1')).toBe(1);
  });

  it('ContentBasedDeduplication: the id attribute or a producer deduplication id is the id; the body hash SQS fills in is not (missing-message-id)', async () => {
    const h = await ctx.queues({ fifo: true, attributes: { ContentBasedDeduplication: 'true' } });
    await h.send({ user: 'u-1', award: 10 }, { id: 'award-1', group: 'u-1' });
    await h.send({ user: 'u-2', award: 10 }, { group: 'u-2', dedup: 'award-2' });
    await h.send({ user: 'u-3', award: 10 }, { group: 'u-3' }); // its deduplication id is SHA-256 of the body
    const recorder = createOutcomeRecorder();
    await ctx.start(h, { handler: recorder.wrap(ctx.inbox()) });

    await recorder.waitFor('award-1', { status: 'processed' });
    await recorder.waitFor('award-2', { status: 'processed' });
    const [dead] = await deadLettersOf(h);
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(dead!.Body).toBe(JSON.stringify({ user: 'u-3', award: 10 }));
    expect(dead!.MessageAttributes!['x-inboxed-reason']?.StringValue).toBe('missing-message-id');
    expect(recorder.counts()).toEqual({ processed: 2, 'dead-letter': 1 });
    const effects = await ctx.t.query<{ message_id: string }>(`select message_id from "${ctx.t.schema}".effects order by message_id`);
    expect(effects.map((r) => r.message_id)).toEqual(['award-1', 'award-2']);
  });

  it('a poison message in a group goes to a FIFO DLQ (keeping its group) and its group moves on', async () => {
    const h = await ctx.queues({ fifo: true });
    for (let i = 1; i <= 3; i++) await h.send({ i }, { id: `P${i}`, group: 'P', dedup: `P${i}` });
    const recorder = createOutcomeRecorder();
    const handler = ctx.inbox(async (message: InboxMessage, tx: any) => {
      if (message.id === 'P2') throw new PermanentError('cannot render');
      await ctx.insertEffect(message, tx);
    });
    await ctx.start(h, { handler: recorder.wrap(handler) });

    await recorder.waitFor('P3', { status: 'processed' });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(await effectOrder()).toEqual(['P1', 'P3']);
    const [dead] = await deadLettersOf(h);
    expect(dead!.Attributes!.MessageGroupId).toBe('P');
    expect(dead!.MessageAttributes!['x-inboxed-reason']?.StringValue).toBe('permanent-failure');
    expect(dead!.MessageAttributes!['message-id']?.StringValue).toBe('P2');
  });

  it('createSqsHandler: within one receive, messages after a retry in the same group are held back behind it', async () => {
    // fauxqs hands out one message per FIFO group at a time, so one receive never holds two of a
    // group there. Real SQS does; we reproduce that receive on a standard queue by tagging real
    // deliveries with a group, and check the held-back ones are neither processed nor released early.
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '30' } });
    for (const id of ['g1', 'g2', 'g3', 'h1']) await h.send({ id }, { id });
    const received = [];
    while (received.length < 4) {
      const { Messages = [] } = await h.client.send(
        new ReceiveMessageCommand({ QueueUrl: h.queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }),
      );
      received.push(...Messages);
    }
    received.sort((a, b) => a.MessageAttributes!['message-id']!.StringValue!.localeCompare(b.MessageAttributes!['message-id']!.StringValue!));
    for (const message of received) message.Attributes!.MessageGroupId = message.MessageAttributes!['message-id']!.StringValue!.slice(0, 1);

    const attempts: string[] = [];
    const processor = ctx.inbox(async (message: InboxMessage, tx: any) => {
      attempts.push(message.id);
      if (message.id === 'g2') throw new Error('not yet');
      await ctx.insertEffect(message, tx);
    });
    const handler = createSqsHandler({
      client: h.client,
      queueUrl: h.queueUrl,
      deadLetterQueueUrl: h.deadLetterQueueUrl,
      handler: processor,
      fifo: true,
      visibilityTimeoutSeconds: 30,
    });
    const { results, errors } = await handler.handle(received);

    expect(errors).toEqual([]);
    expect(results.map((r) => [r.messageId, r.settlement, r.visibilityTimeoutSeconds])).toEqual([
      ['g1', 'deleted', undefined],
      ['g2', 'retry-scheduled', 1],
      ['g3', 'held-back', 1],
      ['h1', 'deleted', undefined],
    ]);
    expect(attempts.sort()).toEqual(['g1', 'g2', 'h1']);
    expect(await effectOrder()).toEqual(expect.arrayContaining(['g1', 'h1']));
    // g2 and g3 come back together after g2's 1 s backoff (not after the 30 s receive timeout).
    const again = [];
    const deadline = Date.now() + 10_000;
    while (again.length < 2 && Date.now() < deadline) {
      const { Messages = [] } = await h.client.send(
        new ReceiveMessageCommand({ QueueUrl: h.queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ['All'] }),
      );
      again.push(...Messages);
    }
    expect(again.map((m) => m.MessageAttributes!['message-id']!.StringValue).sort()).toEqual(['g2', 'g3']);
  });
});

describe('FIFO ContentBasedDeduplication past the deduplication window', () => {
  const ctx = sqsTestContext();
  const realNow = Date.now;
  afterEach(() => {
    Date.now = realNow;
  });

  it('the same body sent again after the 5-minute window is a new message: with fallback it is processed again under its MessageId, not acked as a duplicate', async () => {
    // An emulator of its own: the test moves the clock past SQS's deduplication window.
    const server = await startFauxqs({ port: 0, logger: false });
    const client = sqsClient(server.address);
    try {
      const { QueueUrl: queueUrl } = await client.send(
        new CreateQueueCommand({
          QueueName: 'content-dedup.fifo',
          Attributes: { FifoQueue: 'true', ContentBasedDeduplication: 'true', VisibilityTimeout: '2' },
        }),
      );
      const { QueueUrl: deadLetterQueueUrl } = await client.send(
        new CreateQueueCommand({ QueueName: 'content-dedup-dlq.fifo', Attributes: { FifoQueue: 'true' } }),
      );
      const recorder = createOutcomeRecorder();
      const consumer = createSqsConsumer({
        client,
        queueUrl: queueUrl!,
        deadLetterQueueUrl,
        handler: recorder.wrap(ctx.inbox()),
        messageId: { fallback: true },
        waitTimeSeconds: 1,
      });
      ctx.consumers.push(consumer);
      await consumer.start();
      const body = JSON.stringify({ user: 'u-1', award: 10 }); // a repeatable command: "award 10 points to u-1"
      const first = await client.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body, MessageGroupId: 'u-1' }));
      await recorder.waitFor(first.MessageId!, { status: 'processed' });
      Date.now = () => realNow() + 6 * 60_000;
      const second = await client.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body, MessageGroupId: 'u-1' }));
      expect(second.MessageId).not.toBe(first.MessageId);
      await recorder.waitFor(second.MessageId!, { status: 'processed' });
      await waitFor('queue empty', async () => (await queueDepth(client, queueUrl!)) === 0);
      expect(recorder.counts()).toEqual({ processed: 2 });
      expect(await ctx.t.countEffects()).toBe(2);
    } finally {
      await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
      client.destroy();
      await server.stop();
    }
  });
});
