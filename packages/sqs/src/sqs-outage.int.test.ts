import { SQSClient } from '@aws-sdk/client-sqs';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { requireService, startTcpProxy, waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { createQueue, queueDepth, send, sqsTestContext } from './__tests__/sqs-test-kit.js';
import { SqsErrorCodes } from './sqs-errors.js';

describe('SQS outage', () => {
  const ctx = sqsTestContext();

  it('receives that fail are reported and backed off; after the outage the consumer reconnects and processes', async () => {
    const queue = await createQueue(ctx.client, 'outage');
    const dlq = await createQueue(ctx.client, 'outage-dlq');
    const target = new URL(requireService('sqsEndpoint'));
    const proxy = await startTcpProxy(target.hostname, Number(target.port));
    const proxied = new SQSClient({
      endpoint: `http://127.0.0.1:${proxy.port}`,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      maxAttempts: 1,
    });
    try {
      const reconnects: Array<{ attempt: number }> = [];
      const recorder = createOutcomeRecorder();
      const consumer = await ctx.start(
        { queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(ctx.inbox()), receiveBackoff: { baseDelayMs: 100, maxDelayMs: 200 } },
        proxied,
      );
      consumer.on('reconnect', (info) => reconnects.push(info));

      proxy.cut();
      await waitFor('two failed receives', () => ctx.errors.filter((e) => e.code === SqsErrorCodes.RECEIVE_FAILED).length >= 2, 15_000);
      await send(ctx.client, queue.url, { to: 'ada' }, { id: 'after-outage' });
      proxy.restore();

      await recorder.waitFor('after-outage', { status: 'processed', timeoutMs: 15_000 });
      await waitFor('queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
      expect(reconnects.length).toBe(1);
      expect(reconnects[0]!.attempt).toBeGreaterThanOrEqual(2);
      expect(new Set(ctx.errors.map((e) => e.code))).toEqual(new Set([SqsErrorCodes.RECEIVE_FAILED]));
      expect(await ctx.t.countEffects('after-outage')).toBe(1);
    } finally {
      await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
      proxied.destroy();
      await proxy.close();
    }
  });
});
