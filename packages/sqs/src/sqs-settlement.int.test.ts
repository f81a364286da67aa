import type { DeleteMessageBatchCommandInput, DeleteMessageBatchCommandOutput, SQSClient } from '@aws-sdk/client-sqs';
import { PermanentError, sleep, type InboxMessage } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { createQueue, queueDepth, receiveAll, send, sqsClient, sqsTestContext } from './__tests__/sqs-test-kit.js';
import { SqsErrorCodes } from './sqs-errors.js';

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

describe('settling messages on a real SQS API: deletes, dead-letters, redrive, stop', () => {
  const ctx = sqsTestContext();

  it('a DeleteMessageBatch entry that fails transiently is retried: nothing left in the queue, no error', async () => {
    const queue = await createQueue(ctx.client, 'partial');
    const dlq = await createQueue(ctx.client, 'partial-dlq');
    for (let i = 1; i <= 5; i++) await send(ctx.client, queue.url, { i }, { id: `p-${i}` });
    const consumerClient = sqsClient();
    const fault = failFirstDeleteEntry(consumerClient, { Code: 'InternalError', SenderFault: false });
    const recorder = createOutcomeRecorder();
    await ctx.start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(ctx.inbox()) }, consumerClient);

    await recorder.waitForCount(5);
    await waitFor('queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(fault.injected()).toBe(1);
    expect(recorder.counts()).toEqual({ processed: 5 });
    expect(await ctx.t.countEffects()).toBe(5);
    expect(ctx.errors).toEqual([]);
  });

  it('a delete SQS refuses for good is reported with the message id; the redelivery is a duplicate and is deleted', async () => {
    const queue = await createQueue(ctx.client, 'refused', { VisibilityTimeout: '1' });
    const dlq = await createQueue(ctx.client, 'refused-dlq');
    await send(ctx.client, queue.url, { i: 1 }, { id: 'r-1' });
    const consumerClient = sqsClient();
    failFirstDeleteEntry(consumerClient, { Code: 'ReceiptHandleIsInvalid', SenderFault: true });
    const recorder = createOutcomeRecorder();
    await ctx.start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(ctx.inbox()), visibilityTimeoutSeconds: 1 }, consumerClient);

    await recorder.waitFor('r-1', { status: 'duplicate', timeoutMs: 10_000 });
    await waitFor('queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(ctx.errors.map((e) => [e.code, e.messageIds])).toEqual([[SqsErrorCodes.DELETE_FAILED, ['r-1']]]);
    expect(recorder.counts()).toEqual({ processed: 1, duplicate: 1 });
    expect(await ctx.t.countEffects('r-1')).toBe(1);
  });

  it('without a DLQ URL a dead-letter is left to the redrive policy, and the event says so', async () => {
    const redriveDlq = await createQueue(ctx.client, 'redrive-dlq');
    const queue = await createQueue(ctx.client, 'redrive', {
      VisibilityTimeout: '1',
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: redriveDlq.arn, maxReceiveCount: 2 }),
    });
    await send(ctx.client, queue.url, { to: 'nobody' }, { id: 'poison-1' });
    const destinations: string[] = [];
    const consumer = await ctx.start({
      queueUrl: queue.url,
      handler: ctx.inbox(() => {
        throw new PermanentError('invalid address');
      }),
      redeliveryBackoff: { baseDelayMs: 100, jitter: 'none' },
    });
    consumer.on('dead_letter', (_outcome, destination) => destinations.push(destination));

    // SQS's redrive moves it after maxReceiveCount receives; the adapter never deletes it.
    const [moved] = await receiveAll(ctx.client, redriveDlq.url, 1, 15_000);
    expect(moved?.Body).toBe(JSON.stringify({ to: 'nobody' }));
    expect(await queueDepth(ctx.client, queue.url)).toBe(0);
    expect(destinations.length).toBeGreaterThanOrEqual(1);
    expect(destinations[0]).toContain(`redrive-policy:${redriveDlq.arn}`);
    expect(ctx.errors).toEqual([]);
  });

  it('without a DLQ URL or a redrive policy, start() reports SQS_NO_DEAD_LETTER_TARGET', async () => {
    const queue = await createQueue(ctx.client, 'nowhere');
    await ctx.start({ queueUrl: queue.url, handler: ctx.inbox() });
    expect(ctx.errors.map((e) => e.code)).toEqual([SqsErrorCodes.NO_DEAD_LETTER_TARGET]);
  });

  it('start() rejects with SQS_QUEUE_UNAVAILABLE for a queue that does not exist', async () => {
    const queue = await createQueue(ctx.client, 'exists');
    await expect(ctx.start({ queueUrl: `${queue.url}-missing`, handler: ctx.inbox() })).rejects.toMatchObject({ code: SqsErrorCodes.QUEUE_UNAVAILABLE });
  });

  it('stop() waits for the message in flight, deletes it, and stops polling', async () => {
    const queue = await createQueue(ctx.client, 'stop');
    const dlq = await createQueue(ctx.client, 'stop-dlq');
    await send(ctx.client, queue.url, { i: 1 }, { id: 's-1' });
    let started = false;
    const recorder = createOutcomeRecorder();
    const consumer = await ctx.start({
      queueUrl: queue.url,
      deadLetterQueueUrl: dlq.url,
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
    await consumer.stop();

    expect(recorder.counts()).toEqual({ processed: 1 });
    expect(consumer.status).toEqual({ isRunning: false, polling: 0, inFlight: 0 });
    expect(await queueDepth(ctx.client, queue.url)).toBe(0);
    // Stopped means stopped: a message sent now stays in the queue.
    await send(ctx.client, queue.url, { i: 2 }, { id: 's-2' });
    await sleep(300);
    expect(await queueDepth(ctx.client, queue.url)).toBe(1);
    expect(await ctx.t.countEffects()).toBe(1);
  });

  it('stop() gives up after stopTimeoutMs with SQS_STOP_TIMEOUT; the message is still settled, not lost', async () => {
    const queue = await createQueue(ctx.client, 'stopslow');
    const dlq = await createQueue(ctx.client, 'stopslow-dlq');
    await send(ctx.client, queue.url, { i: 1 }, { id: 'slow-stop' });
    let started = false;
    const recorder = createOutcomeRecorder();
    const consumer = await ctx.start({
      queueUrl: queue.url,
      deadLetterQueueUrl: dlq.url,
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

    expect(ctx.errors.map((e) => e.code)).toEqual([SqsErrorCodes.STOP_TIMEOUT]);
    expect(recorder.outcomes).toEqual([]); // stop() returned while the handler still ran
    await recorder.waitFor('slow-stop', { status: 'processed' });
    await waitFor('queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(await ctx.t.countEffects('slow-stop')).toBe(1);
  });
});
