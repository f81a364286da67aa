import {
  DeleteMessageBatchCommand,
  type DeleteMessageBatchCommandInput,
  type DeleteMessageBatchCommandOutput,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { type InboxError, InboxErrorCodes, type InboxMessage, PermanentError } from '@inboxed/core';
import { ConsumerEventEmitter, sleep } from '@inboxed/core/adapter';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { breakNextRead, waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { deadLettersOf, sqsClient, sqsTestContext } from '../test/sqs-test-kit.js';
import { createSqsHandler, SqsErrorCodes } from './index.js';
import { EMPTY_SHORT_POLL_PAUSE_MS, poll } from './sqs-poller.js';

/**
 * fauxqs (like SQS for stale handles on standard queues) never reports failed entries in a
 * DeleteMessageBatch, so partial failures are injected at the SDK boundary: the first
 * DeleteMessageBatch really deletes all entries but the first, and reports that one as failed.
 * Everything after that (the retry, the redelivery) goes to the real emulator.
 */
function failFirstDeleteEntry(client: SQSClient, failure: { Code: string; SenderFault: boolean }): { injected: () => number } {
  let injected = 0;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'DeleteMessageBatchCommand' || injected > 0) return next(args);
      injected++;
      const input = args.input as DeleteMessageBatchCommandInput;
      const [victim, ...rest] = input.Entries!;
      const result =
        rest.length > 0 ? await next({ ...args, input: { ...input, Entries: rest } }) : { output: { Successful: [], $metadata: {} }, response: {} };
      const output = result.output as DeleteMessageBatchCommandOutput;
      output.Failed = [...(output.Failed ?? []), { Id: victim!.Id, Message: 'injected failure', ...failure }];
      return result;
    },
    { step: 'initialize', name: 'failFirstDeleteEntry' },
  );
  return { injected: () => injected };
}

/** The first `times` SendMessage calls fail with an SDK error blaming `fault` (nothing is sent). */
function failSends(client: SQSClient, fault: 'client' | 'server', times = 1): { failed: () => number } {
  let failed = 0;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'SendMessageCommand' || failed >= times) return next(args);
      failed++;
      throw Object.assign(new Error(`injected ${fault} fault`), {
        name: fault === 'client' ? 'InvalidParameterValue' : 'InternalError',
        $fault: fault,
        $metadata: {},
      });
    },
    { step: 'initialize', name: 'failSends' },
  );
  return { failed: () => failed };
}

const poison = () => {
  throw new PermanentError('invalid address');
};

describe('settling messages on a real SQS API: deletes, dead-letters, redrive, stop', () => {
  const ctx = sqsTestContext();

  it('a DeleteMessageBatch entry that fails transiently is retried: nothing left in the queue, no error', async () => {
    const h = await ctx.queues();
    for (let i = 1; i <= 5; i++) await h.send({ i }, { id: `p-${i}` });
    const consumerClient = sqsClient(h.endpoint);
    const fault = failFirstDeleteEntry(consumerClient, { Code: 'InternalError', SenderFault: false });
    const recorder = createOutcomeRecorder();
    await ctx.start(h, { handler: recorder.wrap(ctx.inbox()) }, consumerClient);

    await recorder.waitForCount(5);
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(fault.injected()).toBe(1);
    expect(recorder.counts()).toEqual({ processed: 5 });
    expect(await ctx.t.countEffects()).toBe(5);
    expect(ctx.errors).toEqual([]);
  });

  it('a delete SQS refuses for good is reported with the message id and not counted as settled; the redelivery is a duplicate and is deleted', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '1' } });
    await h.send({ i: 1 }, { id: 'r-1' });
    const consumerClient = sqsClient(h.endpoint);
    failFirstDeleteEntry(consumerClient, { Code: 'ReceiptHandleIsInvalid', SenderFault: true });
    const recorder = createOutcomeRecorder();
    const consumer = await ctx.start(h, { handler: recorder.wrap(ctx.inbox()), visibilityTimeoutSeconds: 1 }, consumerClient);
    const settled: string[] = [];
    consumer.on('message_processed', (o) => settled.push(`processed ${o.messageId}`));
    consumer.on('duplicate', (o) => settled.push(`duplicate ${o.messageId}`));

    await recorder.waitFor('r-1', { status: 'duplicate', timeoutMs: 10_000 });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(ctx.errors.map((e) => [e.code, e.messageIds])).toEqual([[SqsErrorCodes.DELETE_FAILED, ['r-1']]]);
    expect(recorder.counts()).toEqual({ processed: 1, duplicate: 1 });
    await waitFor('the duplicate settled', () => settled.length === 1);
    expect(settled).toEqual(['duplicate r-1']); // the processed copy was never deleted: no settled event for it
    expect(await ctx.t.countEffects('r-1')).toBe(1);
  });

  it('a dead-letter copy that could not be sent keeps the original (SQS_DEAD_LETTER_FAILED); it comes back and is dead-lettered once', async () => {
    const h = await ctx.queues();
    await h.send({ to: 'nobody' }, { id: 'dlq-down' });
    const consumerClient = sqsClient(h.endpoint);
    const fault = failSends(consumerClient, 'server');
    const destinations: string[] = [];
    const consumer = await ctx.start(h, { handler: ctx.inbox(poison) }, consumerClient);
    consumer.on('dead_letter', (_outcome, destination) => destinations.push(destination));

    const dead = await deadLettersOf(h, 1, 15_000);
    await waitFor('source queue empty', async () => (await h.pending()) === 0);
    expect(fault.failed()).toBe(1);
    expect(dead).toHaveLength(1);
    expect(dead[0]!.MessageAttributes!['x-inboxed-reason']?.StringValue).toBe('permanent-failure');
    expect(ctx.errors.map((e) => [e.code, e.messageIds])).toEqual([[SqsErrorCodes.DEAD_LETTER_FAILED, ['dlq-down']]]);
    expect(destinations).toEqual([h.deadLetterQueueUrl]);
  });

  it('a dead-letter SQS refuses as sent (too large, a bad attribute) is sent again with only the id and reason attributes', async () => {
    const h = await ctx.queues();
    await h.send({ to: 'nobody' }, { id: 'refused-copy', attributes: { tenant: { DataType: 'String', StringValue: 'acme' } } });
    const consumerClient = sqsClient(h.endpoint);
    failSends(consumerClient, 'client');
    await ctx.start(h, { handler: ctx.inbox(poison) }, consumerClient);

    const [dead] = await deadLettersOf(h);
    await waitFor('source queue empty', async () => (await h.pending()) === 0);
    const attributes = dead!.MessageAttributes!;
    expect(attributes['x-inboxed-reason']?.StringValue).toBe('permanent-failure');
    expect(attributes['message-id']?.StringValue).toBe('refused-copy');
    expect(attributes).not.toHaveProperty('tenant');
    expect(attributes).not.toHaveProperty('x-inboxed-overflow');
    expect(ctx.errors).toEqual([]);
  });

  it('without a DLQ URL a dead-letter is left to the redrive policy, never deleted by the adapter, and the event says so', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '1' }, deadLetter: { redrive: { maxReceiveCount: 2 } } });
    await h.send({ to: 'nobody' }, { id: 'poison-1' });
    const destinations: string[] = [];
    const consumer = await ctx.start(h, { handler: ctx.inbox(poison), redeliveryBackoff: { baseDelayMs: 100, jitter: 'none' } });
    consumer.on('dead_letter', (_outcome, destination) => destinations.push(destination));

    // SQS's redrive moves it after maxReceiveCount receives; the adapter never deletes it.
    const [moved] = await deadLettersOf(h, 1, 15_000);
    expect(moved?.Body).toBe(JSON.stringify({ to: 'nobody' }));
    expect(await h.pending()).toBe(0);
    expect(destinations.length).toBeGreaterThanOrEqual(1);
    expect(destinations[0]).toMatch(/^redrive-policy:arn:/);
    // maxReceiveCount 2 is what this test needs, and start() says it is too low for real use.
    expect(ctx.errors.map((e) => e.code)).toEqual([SqsErrorCodes.REDRIVE_RECEIVE_COUNT_LOW]);
  });

  it('without a DLQ URL or a redrive policy, start() reports SQS_NO_DEAD_LETTER_TARGET', async () => {
    const h = await ctx.queues({ deadLetter: 'none' });
    await ctx.start(h, { handler: ctx.inbox() });
    expect(ctx.errors.map((e) => e.code)).toEqual([SqsErrorCodes.NO_DEAD_LETTER_TARGET]);
  });

  it('start() rejects with SQS_QUEUE_UNAVAILABLE for a queue that does not exist, and with INVALID_OPTIONS for a heartbeat slower than the queue visibility', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '2' } });
    await expect(ctx.start(h, { queueUrl: `${h.queueUrl}-missing`, handler: ctx.inbox() })).rejects.toMatchObject({ code: SqsErrorCodes.QUEUE_UNAVAILABLE });
    await expect(ctx.start(h, { handler: ctx.inbox(), heartbeatIntervalMs: 2000 })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_OPTIONS });
  });

  it('stop() aborts the long poll, waits for the message in flight, deletes it, and takes nothing more', async () => {
    const h = await ctx.queues();
    await h.send({ i: 1 }, { id: 's-1' });
    let started = false;
    const recorder = createOutcomeRecorder();
    const consumer = await ctx.start(h, {
      waitTimeSeconds: 20,
      handler: recorder.wrap(
        ctx.inbox(async (message: InboxMessage, tx: any) => {
          started = true;
          await sleep(1_000);
          await ctx.insertEffect(message, tx);
        }),
      ),
    });
    await waitFor('handler started', () => started);
    expect(consumer.status().inFlight).toBe(1);
    const stopping = Date.now();
    await consumer.stop();

    expect(Date.now() - stopping).toBeLessThan(5_000); // not the 20 s long poll
    expect(recorder.counts()).toEqual({ processed: 1 });
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false, inFlight: 0 });
    expect(await h.pending()).toBe(0);
    // Stopped means stopped: a message sent now stays in the queue.
    await h.send({ i: 2 }, { id: 's-2' });
    await sleep(300);
    expect(await h.pending()).toBe(1);
    expect(await ctx.t.countEffects()).toBe(1);
  });

  it('stop() gives up after stopTimeoutMs with STOP_TIMEOUT; the message is still settled, not lost', async () => {
    const h = await ctx.queues();
    await h.send({ i: 1 }, { id: 'slow-stop' });
    let started = false;
    const recorder = createOutcomeRecorder();
    const consumer = await ctx.start(h, {
      stopTimeoutMs: 200,
      handler: recorder.wrap(
        ctx.inbox(async (message: InboxMessage, tx: any) => {
          started = true;
          await sleep(1_500);
          await ctx.insertEffect(message, tx);
        }),
      ),
    });
    await waitFor('handler started', () => started);
    await consumer.stop();

    expect(ctx.errors.map((e) => e.code)).toEqual([InboxErrorCodes.STOP_TIMEOUT]);
    expect(recorder.outcomes).toEqual([]); // stop() returned while the handler still ran
    await recorder.waitFor('slow-stop', { status: 'processed' });
    await waitFor('queue empty', async () => (await h.pending()) === 0);
    expect(await ctx.t.countEffects('slow-stop')).toBe(1);
  });
});

/** Visible and in-flight (not visible) messages of a queue, from SQS. */
async function visibility(client: SQSClient, queueUrl: string): Promise<{ visible: number; inFlight: number }> {
  const { Attributes = {} } = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
  );
  return { visible: Number(Attributes.ApproximateNumberOfMessages), inFlight: Number(Attributes.ApproximateNumberOfMessagesNotVisible) };
}

/** Receives until `count` messages arrived (each kept invisible for `VisibilityTimeout` of the queue). */
async function receiveAll(client: SQSClient, queueUrl: string, count: number, timeoutMs = 10_000): Promise<Message[]> {
  const received: Message[] = [];
  const deadline = Date.now() + timeoutMs;
  while (received.length < count && Date.now() < deadline) {
    const { Messages = [] } = await client.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 1,
        MessageAttributeNames: ['All'],
        MessageSystemAttributeNames: ['All'],
      }),
    );
    received.push(...Messages);
  }
  return received;
}

// Defence in depth: adapter code that throws where nothing should (here the test hook breaks an
// outcome after core validated it) is reported for what it is and costs only its own message.
describe('settling on a real SQS API when settling throws unexpectedly', () => {
  const ctx = sqsTestContext();

  it('one message whose settling throws: the others of the same receive are deleted; it is redelivered after a backoff, then a duplicate', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '30' } });
    for (const id of ['bad', 'ok-1', 'ok-2', 'ok-3']) await h.send({ id }, { id });
    const received = await receiveAll(h.client, h.queueUrl, 4);
    expect(received).toHaveLength(4);
    let broken = 0;
    const handler = createSqsHandler({
      client: h.client,
      queueUrl: h.queueUrl,
      deadLetterQueueUrl: h.deadLetterQueueUrl,
      handler: ctx.inbox(),
      visibilityTimeoutSeconds: 30,
      redeliveryBackoff: { baseDelayMs: 1000, jitter: 'none' },
      beforeSettle: (outcome) => {
        if (outcome.messageId !== 'bad' || broken > 0) return;
        broken++;
        breakNextRead(outcome, 'status');
      },
    });
    handler.on('error', () => {}); // collected in `errors`
    const { results, errors } = await handler.handle(received);

    expect(broken).toBe(1);
    const byId = Object.fromEntries(results.map((r) => [r.messageId, r.settlement]));
    expect(byId).toEqual({ bad: 'failed', 'ok-1': 'deleted', 'ok-2': 'deleted', 'ok-3': 'deleted' });
    expect(errors.map((e: InboxError) => [e.code, e.messageIds])).toEqual([[SqsErrorCodes.SETTLE_FAILED, ['bad']]]);
    expect(errors[0]!.message).toContain('settling message bad threw unexpectedly (not an SQS failure)');
    expect(errors[0]!.message).toContain('reading status boom');
    // Only 'bad' is left, in flight for its backoff (1 s), not for the queue's 30 s.
    expect(await visibility(h.client, h.queueUrl)).toEqual({ visible: 0, inFlight: 1 });
    expect(results.find((r) => r.messageId === 'bad')!.visibilityTimeoutSeconds).toBe(1);
    const again = await receiveAll(h.client, h.queueUrl, 1, 5000);
    expect(again.map((m) => m.MessageAttributes!['message-id']!.StringValue)).toEqual(['bad']);

    const second = await handler.handle(again);
    expect(second.results.map((r) => [r.messageId, r.outcome?.status, r.settlement])).toEqual([['bad', 'duplicate', 'deleted']]);
    expect(second.errors).toEqual([]);
    expect(await h.pending()).toBe(0);
    for (const id of ['bad', 'ok-1', 'ok-2', 'ok-3']) expect(await ctx.t.countEffects(id)).toBe(1);
    expect(await h.deadLetterMessages()).toEqual([]);
  });

  it('the poller loop survives a turn that throws where nothing should: reported (not as an SQS outage), it goes on and settles', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '30' } });
    await h.send({ n: 1 }, { id: 'after' });
    const events = new ConsumerEventEmitter();
    const errors: InboxError[] = [];
    events.on('error', (e) => errors.push(e));
    // The first receive fails; the callback told of it throws (it never should), which used to end the loop.
    const client = sqsClient(h.endpoint);
    let receives = 0;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'ReceiveMessageCommand' && receives++ === 0) throw Object.assign(new Error('injected receive failure'), { $metadata: {} });
        return next(args);
      },
      { step: 'initialize', name: 'failFirstReceive' },
    );
    const polling = new AbortController();
    const processed: string[] = [];
    let loop: 'running' | 'ended' | 'rejected' = 'running';
    const poller = poll({
      client,
      queueUrl: h.queueUrl,
      settings: { stopTimeoutMs: 1000, receiveMaxMessages: 10, concurrency: 1, waitTimeSeconds: 0, receiveBackoff: { baseDelayMs: 100, maxDelayMs: 400 } },
      visibilityTimeoutSeconds: undefined,
      events,
      signal: polling.signal,
      process: async (messages) => {
        processed.push(...messages.map((m) => m.MessageAttributes!['message-id']!.StringValue!));
        await client.send(
          new DeleteMessageBatchCommand({ QueueUrl: h.queueUrl, Entries: messages.map((m, i) => ({ Id: `m${i}`, ReceiptHandle: m.ReceiptHandle })) }),
        );
      },
      lost() {
        throw new Error('lost boom');
      },
      recovered() {},
    }).then(
      () => (loop = 'ended'),
      () => (loop = 'rejected'),
    );
    try {
      await waitFor('the message processed after the failed turn', () => processed.length === 1, 10_000);
      await waitFor('queue empty', async () => (await h.pending()) === 0);
      await sleep(3 * EMPTY_SHORT_POLL_PAUSE_MS);
      expect(loop).toBe('running');
      expect(processed).toEqual(['after']);
      expect(errors.map((e) => e.code)).toEqual([SqsErrorCodes.SETTLE_FAILED]);
      expect(errors[0]!.message).toContain('failed unexpectedly; it goes on in');
      expect(errors[0]!.message).toContain('lost boom');
    } finally {
      polling.abort();
      await poller;
      client.destroy();
    }
    expect(loop).toBe('ended');
  });
});
