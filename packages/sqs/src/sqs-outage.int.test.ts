import { InboxErrorCodes, type InboxMessage, withInbox } from '@inboxed/core';
import { sleep } from '@inboxed/core/adapter';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { databaseUrl, startPostgresProxy, startTcpProxy, waitFor } from '@inboxed/test-support';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { sqsClient, sqsTestContext } from '../test/sqs-test-kit.js';
import { SqsErrorCodes } from './index.js';

describe('SQS outage', () => {
  const ctx = sqsTestContext();

  it('failed receives are reported and backed off, status() says reconnecting; after the outage the consumer reconnects and processes', async () => {
    const h = await ctx.queues();
    const target = new URL(h.endpoint);
    const proxy = await startTcpProxy(target.hostname, Number(target.port));
    const proxied = sqsClient(`http://127.0.0.1:${proxy.port}`, { maxAttempts: 1 });
    try {
      const reconnects: Array<{ attempt: number }> = [];
      const recorder = createOutcomeRecorder();
      const consumer = await ctx.start(h, { handler: recorder.wrap(ctx.inbox()), receiveBackoff: { baseDelayMs: 100, maxDelayMs: 200 } }, proxied);
      consumer.on('reconnect', (info) => reconnects.push(info));
      expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true });

      proxy.cut();
      await waitFor('two failed receives', () => ctx.errors.filter((e) => e.code === SqsErrorCodes.RECEIVE_FAILED).length >= 2, 15_000);
      expect(consumer.status()).toMatchObject({ state: 'reconnecting', connected: false, consuming: false, lastError: { code: SqsErrorCodes.RECEIVE_FAILED } });
      await h.send({ to: 'ada' }, { id: 'after-outage' });
      proxy.restore();

      await recorder.waitFor('after-outage', { status: 'processed', timeoutMs: 15_000 });
      await waitFor('queue empty', async () => (await h.pending()) === 0);
      expect(reconnects.length).toBe(1);
      expect(reconnects[0]!.attempt).toBeGreaterThanOrEqual(2);
      expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true });
      expect(new Set(ctx.errors.map((e) => e.code))).toEqual(new Set([SqsErrorCodes.RECEIVE_FAILED]));
      expect(await ctx.t.countEffects('after-outage')).toBe(1);
    } finally {
      await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
      proxied.destroy();
      await proxy.close();
    }
  });
});

describe('SQS on a hung network (bytes dropped, connections left open)', () => {
  const ctx = sqsTestContext();

  it('a long poll that gets no answer is given up after waitTimeSeconds + 10 s, reported as SQS_RECEIVE_FAILED, and the consumer receives again', async () => {
    const h = await ctx.queues();
    const target = new URL(h.endpoint);
    const proxy = await startTcpProxy(target.hostname, Number(target.port));
    const proxied = sqsClient(`http://127.0.0.1:${proxy.port}`);
    try {
      const reconnects: Array<{ attempt: number }> = [];
      const recorder = createOutcomeRecorder();
      const consumer = await ctx.start(h, { handler: recorder.wrap(ctx.inbox()), waitTimeSeconds: 1 }, proxied);
      consumer.on('reconnect', (info) => reconnects.push(info));
      await h.send({ to: 'ada' }, { id: 'before-freeze' });
      await recorder.waitFor('before-freeze', { status: 'processed' });
      await sleep(300); // the next long poll is in flight
      proxy.freeze();
      await sleep(3000);
      proxy.restore(); // the frozen request's answer is lost for good: only the timeout ends it
      await h.send({ to: 'bob' }, { id: 'after-freeze' });

      await recorder.waitFor('after-freeze', { status: 'processed', timeoutMs: 25_000 });
      await waitFor('queue empty', async () => (await h.pending()) === 0);
      const [timedOut] = ctx.errors;
      expect(ctx.errors.map((e) => e.code)).toEqual([SqsErrorCodes.RECEIVE_FAILED]);
      expect(timedOut!.message).toContain('ReceiveMessage got no answer within 11000 ms');
      expect(reconnects).toEqual([expect.objectContaining({ attempt: 1 })]);
      expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true });
      expect(await ctx.t.countEffects('after-freeze')).toBe(1);
    } finally {
      await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
      proxied.destroy();
      await proxy.close();
    }
  });

  it('a DeleteMessageBatch that gets no answer is given up after 10 s and retried: the message is deleted and its outcome settled', async () => {
    const h = await ctx.queues();
    const target = new URL(h.endpoint);
    const proxy = await startTcpProxy(target.hostname, Number(target.port));
    const proxied = sqsClient(`http://127.0.0.1:${proxy.port}`);
    try {
      await h.send({ to: 'ada' }, { id: 'hung-delete' });
      const settled: string[] = [];
      let frozenAt = 0;
      const consumer = await ctx.start(
        h,
        {
          handler: ctx.inbox(),
          beforeSettle: () => {
            if (frozenAt > 0) return;
            // The delete that follows is sent into a frozen connection; its answer never comes.
            frozenAt = Date.now();
            proxy.freeze();
            setTimeout(() => proxy.restore(), 500);
          },
        },
        proxied,
      );
      consumer.on('message_processed', (outcome) => settled.push(outcome.messageId));

      await waitFor('settled', () => settled.length === 1, 25_000);
      const settledAfterMs = Date.now() - frozenAt;
      await waitFor('queue empty', async () => (await h.pending()) === 0);
      expect(settled).toEqual(['hung-delete']);
      expect(settledAfterMs).toBeGreaterThanOrEqual(10_000);
      expect(settledAfterMs).toBeLessThan(20_000);
      expect(ctx.errors).toEqual([]); // the retried delete succeeded: nothing to report
      expect(await ctx.t.countEffects('hung-delete')).toBe(1);
    } finally {
      await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
      proxied.destroy();
      await proxy.close();
    }
  });
});

describe('SQS with the database down', () => {
  const ctx = sqsTestContext();

  it('receives during a database outage do not count toward maxAttempts: the ledger, not ApproximateReceiveCount, decides', async () => {
    const h = await ctx.queues({ attributes: { VisibilityTimeout: '1' } });
    const { proxy, url } = await startPostgresProxy(databaseUrl());
    const pool = new pg.Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 500 });
    pool.on('error', () => {});
    try {
      let failures = 0;
      const recorder = createOutcomeRecorder();
      const handler = recorder.wrap(
        withInbox(
          async (message: InboxMessage, tx: any) => {
            if (failures++ === 0) throw new Error('one real handler failure');
            await tx.insert(ctx.t.effects).values({ messageId: message.id });
          },
          { db: drizzle(pool), consumer: 'notifications', tables: { schema: ctx.t.schema }, maxAttempts: 3, backoff: { baseDelayMs: 10, jitter: 'none' } },
        ),
      );
      await ctx.start(h, { handler, visibilityTimeoutSeconds: 1 });
      proxy.cut();
      await h.send({ to: 'ada' }, { id: 'through-outage' });
      // Four receives while the database is away: ApproximateReceiveCount reaches 4 > maxAttempts.
      await recorder.waitForCount(4, (o) => o.reason === 'database-unavailable', 20_000);
      proxy.restore();
      const [failed] = await recorder.waitForCount(1, (o) => o.reason === 'handler-failed', 20_000);
      expect(failed).toMatchObject({ status: 'retry', attempt: 1 }); // not dead-letter: the outages were not attempts
      await recorder.waitFor('through-outage', { status: 'processed', timeoutMs: 20_000 });
      expect(recorder.outcomes.some((o) => o.status === 'dead-letter')).toBe(false);
      expect(await ctx.t.countEffects('through-outage')).toBe(1);
      // The outage was reported as one error event, not once per receive.
      expect(ctx.errors.filter((e) => e.code === InboxErrorCodes.DATABASE_UNAVAILABLE)).toHaveLength(1);
      expect(ctx.errors.filter((e) => e.code === InboxErrorCodes.DATABASE_UNAVAILABLE)[0]!.details).toMatchObject({ reason: 'database-unavailable' });
    } finally {
      await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
      await pool.end();
      await proxy.close();
    }
  });
});
