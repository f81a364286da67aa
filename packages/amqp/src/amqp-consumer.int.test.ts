import { InboxErrorCodes, OutcomeReasons, PermanentError, withInbox, wrapProcessor, type InboxError, type InboxOutcome } from '@inboxed/core';
import { DeadLetterHeaders } from '@inboxed/core/adapter';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, waitFor } from '@inboxed/test-support';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpTestKit, createAmqpTestKit } from '../test/amqp-test-kit.js';
import { createHarness } from '../test/harness.js';

// RabbitMQ specifics of createAmqpConsumer. The promises every adapter keeps (duplicates, retries,
// dead-letters, conflicts, crashes, stop under load, batch poison) are in conformance.int.test.ts.
describe('createAmqpConsumer: RabbitMQ specifics', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp');
  });
  afterEach(async () => {
    await k.close();
  });

  it('a retry waits in the retry queue of its tier (no hot loop) and carries its attempt in x-inboxed-attempt', async () => {
    const seen: number[] = [];
    const attempts: number[] = [];
    const consumer = k.consume(
      k.processor((message) => {
        seen.push(performance.now());
        attempts.push(message.attempt ?? 0);
        if (seen.length <= 2) throw new Error(`transient failure ${seen.length}`);
      }),
    );
    await consumer.start();
    await k.h.publishRaw({ orderId: 2 }, { messageId: 'order-2' });
    await k.recorder.waitFor('order-2', { status: 'processed', timeoutMs: 15_000 });
    await consumer.stop();
    expect(k.recorder.outcomes.map((o) => o.status)).toEqual(['retry', 'retry', 'processed']);
    expect(attempts).toEqual([1, 2, 3]);
    // The smallest tier is 100 ms: each redelivery waited at least that long in a retry queue.
    expect(seen[1]! - seen[0]!).toBeGreaterThanOrEqual(95);
    expect(seen[2]! - seen[1]!).toBeGreaterThanOrEqual(95);
    for (const queue of [k.h.queue, ...k.h.retryQueues]) expect(await k.h.depth(queue)).toBe(0);
  });

  it('busy (another worker holds the lease) is not now: delayed in the fitting retry tier, never acked as done, attempt kept', async () => {
    // A real withInbox processor behind a middleware that answers `busy` (as leased mode would) to the
    // first two deliveries of an id; the recorder outside sees every outcome.
    const deliveries: { attempt: number | undefined; headers: Record<string, unknown> | undefined; at: number }[] = [];
    const inner = withInbox(
      async (message, tx: any) => {
        await tx.insert(k.t.effects).values({ messageId: message.id, value: message.payload });
      },
      { db: k.t.db, consumer: k.consumerName, tables: { schema: k.t.schema } },
    );
    const processor = k.recorder.wrap(
      wrapProcessor(inner, async (message, next): Promise<InboxOutcome> => {
        deliveries.push({ attempt: message.attempt, headers: message.headers, at: performance.now() });
        if (deliveries.length > 2) return next(message);
        return {
          status: 'busy',
          reason: OutcomeReasons.LEASE_HELD,
          retryAfterMs: 200,
          messageId: message.id,
          consumer: inner.consumer,
          attempt: message.attempt ?? 1,
        };
      }),
    );
    // 200 ms fits the 1000 ms tier (the smallest >= 200), not the 100 ms one: long enough to see the copy parked there.
    const tier = `${k.h.queue}.retry.1000`;
    const consumer = k.consume(processor, { retryDelaysMs: [100, 1000] });
    const events: string[] = [];
    const parkedWhileBusy: Promise<number>[] = [];
    consumer.on('busy', (outcome) => {
      events.push(`busy:${outcome.messageId}`);
      parkedWhileBusy.push(k.h.depth(tier)); // read at once: the copy waits ~1 s there
    });
    consumer.on('retry', (outcome) => events.push(`retry:${outcome.messageId}`));
    consumer.on('message_processed', (outcome) => events.push(`processed:${outcome.messageId}`));
    consumer.on('dead_letter', (outcome) => events.push(`dead_letter:${outcome.messageId}`));
    await consumer.start();
    await k.h.publishRaw({ orderId: 5 }, { messageId: 'leased-5' });
    await k.recorder.waitFor('leased-5', { status: 'processed', timeoutMs: 20_000 });
    await waitFor('everything settled', async () => (await k.h.pending()) === 0);
    await consumer.stop();

    expect(k.recorder.outcomes.map((o) => o.status)).toEqual(['busy', 'busy', 'processed']);
    expect(events).toEqual(['busy:leased-5', 'busy:leased-5', 'processed:leased-5']);
    // Redelivered, not acked as done: the processor saw it three times, always as attempt 1.
    expect(deliveries.map((d) => d.attempt)).toEqual([1, 1, 1]);
    expect(deliveries.map((d) => d.headers?.['x-inboxed-attempt'])).toEqual([undefined, undefined, undefined]);
    // Each busy copy sat in the 1000 ms retry queue (the broker's x-death says which), then came back.
    expect(await Promise.all(parkedWhileBusy)).toEqual([1, 1]);
    for (const d of deliveries.slice(1)) expect((d.headers?.['x-death'] as { queue: string }[] | undefined)?.[0]?.queue).toBe(tier);
    expect(deliveries[1]!.at - deliveries[0]!.at).toBeGreaterThanOrEqual(950);
    expect(deliveries[2]!.at - deliveries[1]!.at).toBeGreaterThanOrEqual(950);
    // One effect; nothing left in the work or retry queues; nothing dead-lettered.
    expect(await k.effectsPerMessage()).toEqual(new Map([['leased-5', 1]]));
    for (const queue of [k.h.queue, ...k.h.retryQueues]) expect(await k.h.depth(queue)).toBe(0);
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
  });

  it('a dead-lettered copy keeps the properties and headers, says where it came from, and replays as one effect', async () => {
    let failing = true;
    const consumer = k.consume(
      k.processor(() => {
        if (failing) throw new PermanentError('downstream rejected it');
      }),
    );
    const deadLetters: string[] = [];
    consumer.on('dead_letter', (outcome, destination, timing) => {
      deadLetters.push(`${outcome.messageId}->${destination}`);
      expect(timing.durationMs).toBeGreaterThanOrEqual(0);
    });
    await consumer.start();
    // The id only in the default `message-id` header, not in properties.messageId.
    await k.h.publishRaw({ orderId: 8 }, { correlationId: 'corr-8', headers: { 'message-id': 'order-8', tenant: 'acme' } });
    await k.recorder.waitFor('order-8', { status: 'dead-letter' });
    await waitFor('the dead letter', async () => (await k.h.depth(k.h.deadLetterQueue)) === 1);
    const [dead] = await k.h.drain(k.h.deadLetterQueue);
    expect(deadLetters).toEqual([`order-8->amqp:${k.h.deadLetterQueue}`]);
    // The copy carries the id as a property too, so a replay keeps it whatever the header option.
    expect(dead!.properties).toMatchObject({ messageId: 'order-8', correlationId: 'corr-8', contentType: 'application/json', deliveryMode: 2 });
    expect(JSON.parse(dead!.content.toString())).toEqual({ orderId: 8 });
    expect(dead!.properties.headers).toMatchObject({
      tenant: 'acme',
      [DeadLetterHeaders.REASON]: 'permanent-failure',
      [DeadLetterHeaders.ERROR_CODE]: 'PERMANENT_FAILURE',
      [DeadLetterHeaders.CONSUMER]: k.consumerName,
      [DeadLetterHeaders.MESSAGE_ID]: 'order-8',
      'x-inboxed-original-queue': k.h.queue,
      'x-inboxed-original-exchange': '',
      'x-inboxed-original-routing-key': k.h.queue,
    });
    expect(dead!.properties.headers![DeadLetterHeaders.ERROR]).toContain('downstream rejected it');
    expect(dead!.properties.headers![DeadLetterHeaders.FIRST_ATTEMPT_AT]).toBeTruthy();

    failing = false;
    const replay = Object.fromEntries(Object.entries(dead!.properties).filter(([, value]) => value !== undefined));
    await k.h.publishRaw(dead!.content, replay);
    await k.h.publishRaw(dead!.content, replay); // replayed twice by mistake
    await k.recorder.waitFor('order-8', { status: 'processed' });
    await k.recorder.waitFor('order-8', { status: 'duplicate' });
    await consumer.stop();
    expect(await k.t.countEffects('order-8')).toBe(1);
  });

  it('message ids: extract first, then the header, then properties.messageId; non-JSON bodies arrive as Buffers', async () => {
    const payloads = new Map<string, unknown>();
    const consumer = k.consume(
      k.processor((message) => void payloads.set(message.id, message.payload)),
      {
        messageId: { header: 'x-message-id', extract: (delivery) => delivery.properties.correlationId as string | undefined },
      },
    );
    await consumer.start();
    await k.h.publishRaw({ n: 1 }, { messageId: 'ignored-1', headers: { 'x-message-id': 'h-1' } });
    await k.h.publishRaw({ n: 2 }, { messageId: 'p-2' });
    await k.h.publishRaw(Buffer.from('plain text'), { correlationId: 'x-3', contentType: 'text/plain', headers: { 'x-message-id': 'ignored-3' } });
    await k.recorder.waitForCount(3, (o) => o.status === 'processed');
    await consumer.stop();
    expect([...payloads.keys()].sort()).toEqual(['h-1', 'p-2', 'x-3']);
    expect(payloads.get('h-1')).toEqual({ n: 1 });
    expect((payloads.get('x-3') as Buffer).toString()).toBe('plain text');
  });

  it('ids that cannot be read exactly (malformed UTF-8 bytes, a 64-bit integer past 2^53) are dead-lettered, never merged into one id', async () => {
    const consumer = k.consume(k.processor());
    await consumer.start();
    // Each pair is two different producer ids that a lossy decoding would read as one.
    await k.h.publishRaw({ n: 1 }, { headers: { 'message-id': Buffer.from([0xff, 0x41]) } });
    await k.h.publishRaw({ n: 1 }, { headers: { 'message-id': Buffer.from([0xfe, 0x41]) } });
    await k.h.publishRaw({ n: 1 }, { headers: { 'message-id': { '!': 'int64', value: 1541815603606036480n } } });
    await k.h.publishRaw({ n: 1 }, { headers: { 'message-id': { '!': 'int64', value: 1541815603606036481n } } });
    await k.h.publishRaw({ n: 1 }, { headers: { 'message-id': Buffer.from('évé-ok') } });
    await k.recorder.waitForCount(5, () => true);
    await waitFor('settled', async () => (await k.h.pending()) === 0);
    await consumer.stop();
    expect(k.recorder.counts()).toEqual({ 'dead-letter': 4, processed: 1 });
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(4);
    expect([...(await k.effectsPerMessage()).entries()]).toEqual([['évé-ok', 1]]);
  });

  it("runs on the caller's connection and leaves it open after stop()", async () => {
    const connection = await amqp.connect(k.h.url);
    try {
      const consumer = k.consume(k.processor(), { url: undefined, connection });
      await consumer.start();
      await k.h.publishRaw({ orderId: 9 }, { messageId: 'order-9' });
      await k.recorder.waitFor('order-9', { status: 'processed' });
      await consumer.stop();
      const channel = await connection.createChannel(); // still usable: the consumer closed only its channels
      expect((await channel.checkQueue(k.h.queue)).messageCount).toBe(0);
      await channel.close();
    } finally {
      await connection.close();
    }
  });

  it('rejects invalid options at construction', () => {
    const handler = k.processor();
    expect(() => k.consume(handler, { connection: {} as never })).toThrow(/exactly one of options.url and options.connection/);
    expect(() => k.consume((async () => ({})) as never)).toThrow(/withInbox\(\) or withInboxBatch\(\)/);
    expect(() => k.consume(handler, { prefetch: 0 })).toThrow(/prefetch/);
    expect(() => k.consume(handler, { batchSize: 0 })).toThrow(/batchSize/);
    expect(() => k.consume(handler, { messageId: { fallback: true } })).toThrow(/fallback is not supported/);
    expect(() => k.consume(handler, { retryDelaysMs: [] })).toThrow(/retryDelaysMs/);
  });

  it('start() fails fast with AMQP_CONNECT_FAILED when the work queue does not exist', async () => {
    const consumer = k.consume(k.processor(), { queue: `${k.h.queue}-missing` });
    await expect(consumer.start()).rejects.toMatchObject({
      code: 'AMQP_CONNECT_FAILED',
      message: expect.stringMatching(/does not exist: declare it, or pass queueOptions/),
    });
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false });
  });
  it('start() against a virtual host that does not exist says so, not only amqplib\'s "Expected ConnectionOpenOk"', async () => {
    const url = new URL(k.h.url);
    url.pathname = `/${k.h.queue}-no-such-vhost`;
    const consumer = k.consume(k.processor(), { url: url.toString(), connection: undefined });
    await expect(consumer.start()).rejects.toMatchObject({
      code: 'AMQP_CONNECT_FAILED',
      message: expect.stringMatching(/virtual host that exists/),
    });
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false });
  });
  it('stop() during a start stuck on a broker that never answers abandons the start at once', async () => {
    // A TCP server that accepts and then says nothing, as a half-dead broker or a black-holed port does.
    const sockets = new Set<import('node:net').Socket>();
    const silent = net.createServer((socket) => void sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as import('node:net').AddressInfo;
    try {
      const consumer = k.consume(k.processor(), { url: `amqp://guest:guest@127.0.0.1:${port}`, connection: undefined });
      const starting = consumer.start();
      const rejected = expect(starting).rejects.toMatchObject({ code: 'AMQP_CONNECT_FAILED', message: expect.stringMatching(/abandoned/) });
      await waitFor('the connection attempt to arrive', () => sockets.size > 0);
      const began = Date.now();
      await consumer.stop();
      await rejected;
      expect(Date.now() - began).toBeLessThan(2_000);
      expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false });
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('stop() during start(): what the abandoned session received is given back, nothing stays in flight, and the next stop does not wait', async () => {
    for (let i = 0; i < 50; i++) await k.h.publishRaw({ n: i }, { messageId: `m-${i}` });
    const consumer = k.consume(k.processor(), { stopTimeoutMs: 1500 });
    const errors: InboxError[] = [];
    consumer.on('error', (error) => errors.push(error as InboxError));
    // The session start() opens anyway consumes before it is closed: what it gets after the stop
    // signal fired is held, then must be forgotten with its channel.
    const starting = consumer.start().catch((error: InboxError) => error.code);
    const stopping = consumer.stop();
    expect(await starting).toBe('AMQP_CONNECT_FAILED');
    await stopping;
    // The abandoned session opens, consumes and is closed in the background: let it.
    await sleep(1_000);
    expect(consumer.status().inFlight).toBe(0);
    await consumer.start();
    await waitFor('every message processed once', async () => (await k.effectsPerMessage()).size === 50, 20_000);
    expect([...(await k.effectsPerMessage()).values()].every((n) => n === 1)).toBe(true);
    await consumer.stop();
    expect(errors.filter((error) => error.code === InboxErrorCodes.STOP_TIMEOUT)).toEqual([]);
    expect(consumer.status().inFlight).toBe(0);
  });
});

describe('createAmqpConsumer: misconfiguration is loud', () => {
  it('start() rejects with INBOX_TABLE_MISSING when the inbox tables were never migrated; the message stays queued', async () => {
    const t = await createTestDatabase('node-postgres');
    const h = createHarness();
    await h.setup();
    try {
      await h.publishRaw({ a: 1 }, { messageId: 'm-1' });
      const consumer = h.consumer(withInbox(async () => {}, { db: t.db, consumer: 'c', tables: { schema: t.schema } }));
      await expect(consumer.start()).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING, message: expect.stringMatching(/migrate\(/) });
      expect(consumer.status().state).toBe('stopped');
      expect(await h.depth()).toBe(1);
    } finally {
      await h.teardown();
      await t.close();
    }
  });

  it('the database down at start is an error event, not a failed start; retries while it is down raise one error event, not one per delivery', async () => {
    const h = createHarness();
    await h.setup();
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMillis: 200 });
    try {
      const recorder = createOutcomeRecorder();
      const consumer = h.consumer(recorder.wrap(withInbox(async () => {}, { db: drizzle(pool), consumer: 'c', backoff: { baseDelayMs: 10 } })));
      const errors: InboxError[] = [];
      consumer.on('error', (error) => errors.push(error));
      await consumer.start();
      expect(errors.map((e) => e.code)).toEqual([InboxErrorCodes.DATABASE_UNAVAILABLE]);
      for (let i = 0; i < 3; i++) await h.publishRaw({ i }, { messageId: `m-${i}` });
      await recorder.waitForCount(6, (o) => o.reason === 'database-unavailable', 15_000);
      await consumer.stop();
      expect(errors.map((e) => e.code)).toEqual([InboxErrorCodes.DATABASE_UNAVAILABLE, InboxErrorCodes.DATABASE_UNAVAILABLE]);
      expect(errors[1]!.details).toMatchObject({ reason: 'database-unavailable', retriesSinceLastReport: 1 });
      expect(consumer.status().lastError).toMatchObject({ code: InboxErrorCodes.DATABASE_UNAVAILABLE });
    } finally {
      await h.teardown();
      await pool.end();
    }
  });
});
