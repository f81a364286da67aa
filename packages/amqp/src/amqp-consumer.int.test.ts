import { DeadLetterHeaders, InboxErrorCodes, PermanentError, withInbox, type InboxError } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, uniqueName, waitFor } from '@inboxed/test-support';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import amqp from 'amqplib';
import { createAmqpFixture, type AmqpFixture } from '../test/amqp-fixture.js';
import { amqpUrl, createTestBroker } from '../test/amqp-test-broker.js';
import { createAmqpConsumer } from './amqp-consumer.js';
import { retryQueueName } from './amqp-topology.js';

describe('createAmqpConsumer against RabbitMQ and PostgreSQL', () => {
  let f: AmqpFixture;
  beforeEach(async () => {
    f = await createAmqpFixture('amqp');
  });
  afterEach(async () => {
    await f.close();
  });

  it('the same message published 3 times: 1 effect, all 3 acked, queue empty', async () => {
    const consumer = f.consume({ handler: f.processor() });
    await consumer.start();
    for (let i = 0; i < 3; i++) await f.broker.publish(f.queue, { orderId: 1, amount: 10 }, { messageId: 'order-1' });
    await f.recorder.waitForCount(3);
    await consumer.stop(); // unacked deliveries would be back in the queue now
    expect(f.recorder.counts()).toEqual({ processed: 1, duplicate: 2 });
    expect(await f.t.countEffects('order-1')).toBe(1);
    expect(await f.broker.depth(f.queue)).toBe(0);
    expect(consumer.status).toBe('stopped');
  });

  it('fails twice then succeeds: 1 effect, redelivered through the retry queue after at least the tier delay', async () => {
    const seen: number[] = [];
    const attempts: number[] = [];
    const consumer = f.consume({
      handler: f.processor((message) => {
        seen.push(performance.now());
        attempts.push(message.attempt ?? 0);
        if (seen.length <= 2) throw new Error(`transient failure ${seen.length}`);
      }),
      retryDelaysMs: [300],
    });
    const retries: number[] = [];
    consumer.on('retry', (outcome) => retries.push(outcome.attempt ?? 0));
    await consumer.start();
    await f.broker.publish(f.queue, { orderId: 2 }, { messageId: 'order-2' });
    await f.recorder.waitFor('order-2', { status: 'processed', timeoutMs: 15_000 });
    await consumer.stop();

    expect(f.recorder.outcomes.map((o) => o.status)).toEqual(['retry', 'retry', 'processed']);
    expect(retries).toEqual([1, 2]);
    // The attempt travels in the x-inboxed-attempt header: 1, 2, 3.
    expect(attempts).toEqual([1, 2, 3]);
    expect(await f.t.countEffects('order-2')).toBe(1);
    // Each redelivery waited in the 300 ms retry queue: no hot loop.
    expect(seen[1]! - seen[0]!).toBeGreaterThanOrEqual(300);
    expect(seen[2]! - seen[1]!).toBeGreaterThanOrEqual(300);
    expect(await f.broker.depth(f.queue)).toBe(0);
    expect(await f.broker.depth(retryQueueName(f.queue, 300))).toBe(0);
  });

  it('a permanent failure goes to the dead-letter queue with the reason header and the original message id', async () => {
    const consumer = f.consume({
      handler: f.processor(() => {
        throw new PermanentError('order is malformed');
      }),
    });
    const deadLetters: string[] = [];
    consumer.on('dead_letter', (outcome, destination) => deadLetters.push(`${outcome.messageId}->${destination}`));
    await consumer.start();
    await f.broker.publish(f.queue, { orderId: 3 }, { messageId: 'order-3', correlationId: 'corr-3', headers: { tenant: 'acme' } });
    await f.recorder.waitFor('order-3', { status: 'dead-letter' });
    const dlq = `${f.queue}.dead-letter`;
    await waitFor('dead letter', async () => (await f.broker.depth(dlq)) === 1);
    await consumer.stop();

    const [dead] = await f.broker.drain(dlq);
    expect(dead!.properties.messageId).toBe('order-3');
    expect(dead!.properties.correlationId).toBe('corr-3');
    expect(dead!.properties.contentType).toBe('application/json');
    expect(JSON.parse(dead!.content.toString())).toEqual({ orderId: 3 });
    const headers = dead!.properties.headers!;
    expect(headers[DeadLetterHeaders.REASON]).toBe('permanent-failure');
    expect(headers[DeadLetterHeaders.ERROR]).toContain('order is malformed');
    expect(headers[DeadLetterHeaders.CONSUMER]).toBe(f.consumer);
    expect(headers[DeadLetterHeaders.MESSAGE_ID]).toBe('order-3');
    expect(headers[DeadLetterHeaders.FIRST_ATTEMPT_AT]).toBeTruthy();
    expect(headers[DeadLetterHeaders.LAST_ATTEMPT_AT]).toBeTruthy();
    expect(headers['x-inboxed-original-queue']).toBe(f.queue);
    expect(headers.tenant).toBe('acme');
    expect(deadLetters).toEqual([`order-3->amqp:${dlq}`]);
    expect(await f.t.countEffects()).toBe(0);
    expect(await f.broker.depth(f.queue)).toBe(0);
  });

  it('exhausted retries are dead-lettered with max-attempts-exceeded after maxAttempts deliveries', async () => {
    let calls = 0;
    const consumer = f.consume({
      handler: f.processor(
        () => {
          calls++;
          throw new Error('always down');
        },
        { maxAttempts: 3 },
      ),
      retryDelaysMs: [100],
    });
    await consumer.start();
    await f.broker.publish(f.queue, { orderId: 4 }, { messageId: 'order-4' });
    await f.recorder.waitFor('order-4', { status: 'dead-letter', timeoutMs: 15_000 });
    await consumer.stop();
    expect(calls).toBe(3);
    const [dead] = await f.broker.drain(`${f.queue}.dead-letter`);
    expect(dead!.properties.headers![DeadLetterHeaders.REASON]).toBe('max-attempts-exceeded');
    expect(dead!.properties.headers![DeadLetterHeaders.ATTEMPT]).toBe('3');
  });

  it('a payload conflict (same id, other payload) is dead-lettered with payload-mismatch; the first effect stays', async () => {
    const consumer = f.consume({ handler: f.processor() });
    await consumer.start();
    await f.broker.publish(f.queue, { orderId: 5, amount: 10 }, { messageId: 'order-5' });
    await f.recorder.waitFor('order-5', { status: 'processed' });
    await f.broker.publish(f.queue, { orderId: 5, amount: 99 }, { messageId: 'order-5' });
    await f.recorder.waitFor('order-5', { status: 'conflict' });
    await waitFor('dead letter', async () => (await f.broker.depth(`${f.queue}.dead-letter`)) === 1);
    await consumer.stop();
    const [dead] = await f.broker.drain(`${f.queue}.dead-letter`);
    expect(dead!.properties.messageId).toBe('order-5');
    expect(dead!.properties.headers![DeadLetterHeaders.REASON]).toBe('payload-mismatch');
    expect(dead!.properties.headers![DeadLetterHeaders.ERROR_CODE]).toBe('PAYLOAD_MISMATCH');
    expect(JSON.parse(dead!.content.toString())).toEqual({ orderId: 5, amount: 99 });
    expect(await f.t.countEffects('order-5')).toBe(1);
  });

  it('a message without an id and a JSON message that does not parse are dead-lettered, never processed', async () => {
    const consumer = f.consume({ handler: f.processor() });
    await consumer.start();
    await f.broker.publish(f.queue, { orderId: 6 }); // no messageId, no id header
    await f.broker.publish(f.queue, Buffer.from('{"orderId": 7,'), { messageId: 'order-7', contentType: 'application/json' });
    await f.recorder.waitForCount(1, (o) => o.reason === 'missing-message-id');
    await waitFor('two dead letters', async () => (await f.broker.depth(`${f.queue}.dead-letter`)) === 2);
    await consumer.stop();
    const dead = await f.broker.drain(`${f.queue}.dead-letter`);
    const byReason = new Map(dead.map((d) => [d.properties.headers![DeadLetterHeaders.REASON] as string, d]));
    expect([...byReason.keys()].sort()).toEqual(['missing-message-id', 'unparseable-body']);
    expect(JSON.parse(byReason.get('missing-message-id')!.content.toString())).toEqual({ orderId: 6 });
    const unparseable = byReason.get('unparseable-body')!;
    expect(unparseable.properties.messageId).toBe('order-7');
    expect(unparseable.content.toString()).toBe('{"orderId": 7,');
    expect(unparseable.properties.headers![DeadLetterHeaders.ERROR_CODE]).toBe('UNPARSEABLE_BODY');
    expect(await f.t.countEffects()).toBe(0);
    expect(await f.broker.depth(f.queue)).toBe(0);
  });

  it('ids come from x-message-id / message-id headers or the extractor; non-JSON bodies arrive as Buffers', async () => {
    const payloads = new Map<string, unknown>();
    const consumer = f.consume({
      handler: f.processor((message) => void payloads.set(message.id, message.payload)),
      messageId: (delivery) => delivery.properties.correlationId as string | undefined,
    });
    await consumer.start();
    await f.broker.publish(f.queue, { n: 1 }, { headers: { 'x-message-id': 'h-1' } });
    await f.broker.publish(f.queue, { n: 2 }, { headers: { 'message-id': 'h-2' } });
    await f.broker.publish(f.queue, Buffer.from('plain text'), { correlationId: 'x-3', contentType: 'text/plain' });
    await f.recorder.waitForCount(3, (o) => o.status === 'processed');
    await consumer.stop();
    expect(payloads.get('h-1')).toEqual({ n: 1 });
    expect(payloads.get('h-2')).toEqual({ n: 2 });
    expect(Buffer.isBuffer(payloads.get('x-3'))).toBe(true);
    expect((payloads.get('x-3') as Buffer).toString()).toBe('plain text');
  });

  it('a dead-lettered message replayed into the work queue keeps its id and is then processed once', async () => {
    let failing = true;
    const consumer = f.consume({
      handler: f.processor(() => {
        if (failing) throw new PermanentError('downstream rejected it');
      }),
    });
    await consumer.start();
    await f.broker.publish(f.queue, { orderId: 8 }, { headers: { 'x-message-id': 'order-8' } });
    await f.recorder.waitFor('order-8', { status: 'dead-letter' });
    await waitFor('dead letter', async () => (await f.broker.depth(`${f.queue}.dead-letter`)) === 1);
    const [dead] = await f.broker.drain(`${f.queue}.dead-letter`);
    // The copy carries the id as a property even though the original had it only in a header.
    expect(dead!.properties.messageId).toBe('order-8');

    failing = false;
    const replay = { ...dead!.properties, headers: dead!.properties.headers } as Record<string, unknown>;
    for (const key of Object.keys(replay)) if (replay[key] === undefined) delete replay[key];
    await f.broker.publish(f.queue, dead!.content, replay);
    await f.broker.publish(f.queue, dead!.content, replay); // replayed twice by mistake
    await f.recorder.waitFor('order-8', { status: 'processed' });
    await f.recorder.waitFor('order-8', { status: 'duplicate' });
    await consumer.stop();
    expect(await f.t.countEffects('order-8')).toBe(1);
  });

  it('runs on a connection the caller owns and leaves it open after stop()', async () => {
    const connection = await amqp.connect(amqpUrl());
    try {
      const consumer = f.consume({ handler: f.processor(), url: undefined, connection });
      await consumer.start();
      await f.broker.publish(f.queue, { orderId: 9 }, { messageId: 'order-9' });
      await f.recorder.waitFor('order-9', { status: 'processed' });
      await consumer.stop();
      // Still usable: the consumer closed only its own channels.
      const channel = await connection.createChannel();
      expect((await channel.checkQueue(f.queue)).messageCount).toBe(0);
      await channel.close();
      expect(await f.t.countEffects('order-9')).toBe(1);
    } finally {
      await connection.close();
    }
  });

  it('rejects invalid options at construction', () => {
    expect(() => f.consume({ handler: f.processor(), connection: {} as never })).toThrow(/exactly one of options.url and options.connection/);
    expect(() => f.consume({ handler: (async () => ({})) as never })).toThrow(/withInbox\(\) or withInboxBatch\(\)/);
    expect(() => f.consume({ handler: f.processor(), prefetch: 0 })).toThrow(/prefetch/);
  });

  it('start() fails fast with AMQP_CONNECT_FAILED when the work queue does not exist', async () => {
    const consumer = f.consume({ handler: f.processor(), queue: `${f.queue}-missing` });
    await expect(consumer.start()).rejects.toMatchObject({
      code: 'AMQP_CONNECT_FAILED',
      message: expect.stringMatching(/does not exist: declare it, or pass queueOptions/),
    });
    expect(consumer.status).toBe('stopped');
  });
});

describe('createAmqpConsumer: misconfiguration is loud', () => {
  it('start() rejects with INBOX_TABLE_MISSING when the inbox tables were never migrated; the message stays queued', async () => {
    const t = await createTestDatabase('node-postgres');
    const broker = await createTestBroker();
    try {
      const queue = await broker.declareQueue(uniqueName('unmigrated'));
      await broker.publish(queue, { a: 1 }, { messageId: 'm-1' });
      const consumer = createAmqpConsumer({
        url: amqpUrl(),
        queue,
        handler: withInbox(async () => {}, { db: t.db, consumer: 'c', tables: { schema: t.schema } }),
      });
      await expect(consumer.start()).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING, message: expect.stringMatching(/migrate\(/) });
      expect(consumer.status).toBe('stopped');
      expect(await broker.depth(queue)).toBe(1);
    } finally {
      await broker.close();
      await t.close();
    }
  });

  it('the database down at start is an error event, not a failed start; retries while it is down raise one error event, not one per delivery', async () => {
    const broker = await createTestBroker();
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMillis: 200 });
    try {
      const queue = await broker.declareQueue(uniqueName('db-down'));
      const recorder = createOutcomeRecorder();
      const consumer = createAmqpConsumer({
        url: amqpUrl(),
        queue,
        retryDelaysMs: [50],
        handler: recorder.wrap(withInbox(async () => {}, { db: drizzle(pool), consumer: 'c', backoff: { baseDelayMs: 10 } })),
      });
      const errors: InboxError[] = [];
      consumer.on('error', (error) => errors.push(error));
      await consumer.start();
      expect(errors.map((e) => e.code)).toEqual([InboxErrorCodes.DATABASE_UNAVAILABLE]);
      for (let i = 0; i < 3; i++) await broker.publish(queue, { i }, { messageId: `m-${i}` });
      await recorder.waitForCount(6, (o) => o.reason === 'database-unavailable', 15_000);
      await consumer.stop();
      expect(errors.map((e) => e.code)).toEqual([InboxErrorCodes.DATABASE_UNAVAILABLE, InboxErrorCodes.DATABASE_UNAVAILABLE]);
      expect(errors[1]!.details).toMatchObject({ reason: 'database-unavailable', retriesSinceLastReport: 1 });
    } finally {
      await broker.close();
      await pool.end();
    }
  });
});
