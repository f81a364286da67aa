import { execFile } from 'node:child_process';
import { type InboxError, PermanentError } from '@inboxed/core';
import type { ConsumerStatus, InboxLogger } from '@inboxed/core/adapter';
import { breakNextRead, waitFor } from '@inboxed/test-support';
import { uniqueName } from '@inboxed/test-support/unique-name';
import amqp, { type ConfirmChannel, type Options } from 'amqplib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpTestKit, createAmqpTestKit } from '../test/amqp-test-kit.js';
import { HARNESS_RETRY_DELAYS_MS } from '../test/harness.js';
import { createAmqpMessageHandler } from './index.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// RabbitMQ faults the conformance suite does not cover: the server closing the connection, and
// the broker cancelling the consumer.
describe('RabbitMQ faults: server-side disconnects, consumer cancel notifications', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp_fault');
  });
  afterEach(async () => {
    await k.close();
  });

  it('the server closes the connection mid-stream: state reconnecting, then running again; every message processed exactly once', async () => {
    const total = 300;
    const warnings: string[] = [];
    const logger: InboxLogger = { debug() {}, info() {}, warn: (_fields, message) => void warnings.push(String(message)), error() {} };
    const consumer = k.consume(
      k.processor(() => sleep(5)),
      { prefetch: 16, connectionName: `${k.h.queue}-conn`, logger },
    );
    const reconnects: number[] = [];
    const whileLost: ConsumerStatus[] = [];
    consumer.on('reconnect', ({ attempt }) => reconnects.push(attempt));
    consumer.on('error', (error) => {
      if (error.code === 'AMQP_CONNECTION_LOST') whileLost.push(consumer.status());
    });
    await consumer.start();
    await k.h.publish(Array.from({ length: total }, (_, i) => ({ id: `m-${i}`, payload: { n: i } })));

    await k.recorder.waitForCount(50, (o) => o.status === 'processed', 30_000);
    expect(await k.h.closeConnectionsNamed(`${k.h.queue}-conn`)).toBe(1);
    await waitFor('a reconnect', () => reconnects.length > 0, 30_000);
    expect(whileLost[0]).toMatchObject({ state: 'reconnecting', connected: false, consuming: false });
    expect(warnings).toContain('connection lost; reconnecting');
    expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true, lastError: { code: 'AMQP_CONNECTION_LOST' } });
    await waitFor('every message processed', async () => (await k.effectsPerMessage()).size === total, 60_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 30_000);
    await consumer.stop();

    const perMessage = await k.effectsPerMessage();
    expect(perMessage.size).toBe(total);
    expect([...perMessage.values()].every((n) => n === 1)).toBe(true);
    expect(k.recorder.counts().processed).toBe(total);
    expect(consumer.status().state).toBe('stopped');
  });

  it('the broker cancels the consumer (queue deleted): it re-subscribes once the queue is back', async () => {
    const consumer = k.consume(k.processor());
    const codes: string[] = [];
    consumer.on('error', (e) => codes.push(String(e.code)));
    let reconnected = false;
    consumer.on('reconnect', () => (reconnected = true));
    await consumer.start();
    await k.h.publishRaw({ n: 1 }, { messageId: 'before' });
    await k.recorder.waitFor('before', { status: 'processed' });
    await k.h.channel.deleteQueue(k.h.queue);
    await waitFor('the cancel to be noticed', () => codes.includes('AMQP_CONSUMER_CANCELLED'), 20_000);
    expect(consumer.status().consuming).toBe(false);
    await k.h.channel.assertQueue(k.h.queue, { durable: true });
    await waitFor('a reconnect', () => reconnected, 20_000);
    await k.h.publishRaw({ n: 2 }, { messageId: 'after' });
    await k.recorder.waitFor('after', { status: 'processed', timeoutMs: 20_000 });
    expect(consumer.status()).toMatchObject({ state: 'running', consuming: true });
    await consumer.stop();
    expect(await k.t.countEffects()).toBe(2);
  });

  it('stop() while reconnecting (the queue is gone, every attempt fails) returns promptly and leaves nothing open', async () => {
    const consumer = k.consume(k.processor(), { connectionName: `${k.h.queue}-gone`, reconnect: { baseDelayMs: 200, maxDelayMs: 200, jitter: 'none' } });
    const attempts: string[] = [];
    consumer.on('error', (e) => attempts.push(e.message));
    await consumer.start();
    await k.h.channel.deleteQueue(k.h.queue);
    await waitFor('two failed reconnect attempts', () => attempts.filter((m) => m.includes('reconnect attempt')).length >= 2, 20_000);
    expect(consumer.status()).toMatchObject({ state: 'reconnecting', connected: false, consuming: false });
    const started = Date.now();
    await consumer.stop();
    expect(Date.now() - started).toBeLessThan(2000);
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false });
    expect(await k.h.connectionsNamed(`${k.h.queue}-gone`)).toEqual([]);
  });

  it("on the caller's recovering connection (amqplib recovery): a server-side close is survived, the connection stays the caller's", async () => {
    const name = `${k.h.queue}-recovering`;
    const connection = await amqp.connect(k.h.url, { recovery: { initialDelay: 50, maxDelay: 200 }, clientProperties: { connection_name: name } });
    connection.on('error', () => {});
    try {
      const consumer = k.consume(k.processor(), { url: undefined, connection });
      const reconnects: number[] = [];
      consumer.on('reconnect', ({ attempt }) => reconnects.push(attempt));
      await consumer.start();
      await k.h.publishRaw({ n: 1 }, { messageId: 'r-1' });
      await k.recorder.waitFor('r-1', { status: 'processed' });
      expect(await k.h.closeConnectionsNamed(name)).toBe(1);
      await waitFor('a reconnect', () => reconnects.length > 0, 20_000);
      await k.h.publishRaw({ n: 2 }, { messageId: 'r-2' });
      await k.recorder.waitFor('r-2', { status: 'processed', timeoutMs: 20_000 });
      await consumer.stop();
      expect(await k.h.connectionsNamed(name)).toHaveLength(1); // recovered by amqplib, never closed by the consumer
      expect(await k.t.countEffects()).toBe(2);
    } finally {
      await connection.close();
    }
  });
});

function rabbitmqctl(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => execFile('rabbitmqctl', args, { timeout: 30_000 }, (error, stdout) => (error ? reject(error) : resolve(stdout))));
}

const text = (value: unknown) => (Buffer.isBuffer(value) ? value.toString('utf8') : value === undefined ? undefined : String(value));
const deadLetterRows = async (k: AmqpTestKit, id: string) =>
  (await k.t.query<{ n: number }>(`select count(*)::int as n from "${k.t.schema}".inbox_dead_letters where message_id = '${id}'`))[0]!.n;

/**
 * A connection whose confirm channels publish like amqplib 0.10 when `unencodable` says so: the
 * confirm callback is registered, then the encoding throws (a RangeError, as for a header table
 * over 64 KiB), leaving a callback for a message never sent. Counts the confirm channels opened.
 */
async function connectionWithUnencodableCopies(url: string, name: string, unencodable: (routingKey: string, options: Options.Publish) => boolean) {
  const connection = await amqp.connect(url, { clientProperties: { connection_name: name } });
  connection.on('error', () => {});
  const createConfirmChannel = connection.createConfirmChannel.bind(connection);
  const opened = { confirmChannels: 0 };
  connection.createConfirmChannel = async () => {
    const channel = await createConfirmChannel();
    opened.confirmChannels++;
    const publish = channel.publish.bind(channel);
    channel.publish = ((exchange: string, routingKey: string, content: Buffer, options: Options.Publish, callback: (error: unknown) => void) => {
      if (!unencodable(routingKey, options)) return publish(exchange, routingKey, content, options, callback);
      (channel as unknown as { pushConfirmCallback(cb: unknown): void }).pushConfirmCallback(callback);
      throw new RangeError('Encoded field table (headers or arguments) exceeds the 65536 byte encoding buffer');
    }) as ConfirmChannel['publish'];
    return channel;
  };
  return { connection, opened };
}

// Copies amqplib cannot encode as they are, and a broker that closes every new session.
describe('RabbitMQ faults: copies too large to encode, a publish that throws, a missing dead-letter exchange', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp_copy');
  });
  afterEach(async () => {
    await k.close();
  });

  it('a message with ~64 KiB of headers is dead-lettered once, its largest header dropped and named, reason headers, id and body kept', async () => {
    const consumer = k.consume(k.processor(), { requeueDelayMs: 100 });
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    await consumer.start();
    await k.h.publishRaw(Buffer.from('not json'), {
      contentType: 'application/json',
      headers: { 'message-id': 'big-dl', pad: 'x'.repeat(64_900), small: 'kept' },
    });
    await waitFor('the dead-letter copy', async () => (await k.h.depth(k.h.deadLetterQueue)) === 1, 20_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 20_000);
    await consumer.stop();

    const [copy] = await k.h.drain(k.h.deadLetterQueue);
    const headers = copy!.properties.headers ?? {};
    expect(text(headers['x-inboxed-reason'])).toBe('unparseable-body');
    expect(text(headers['x-inboxed-message-id'])).toBe('big-dl');
    expect(headers['x-inboxed-headers-dropped']).toEqual(['pad']);
    expect(headers.pad).toBeUndefined();
    expect(text(headers.small)).toBe('kept');
    expect(text(headers['message-id'])).toBe('big-dl');
    expect(copy!.properties.messageId).toBe('big-dl');
    expect(copy!.content.toString()).toBe('not json');
    expect(await deadLetterRows(k, 'big-dl')).toBe(1);
    expect(errors.map((e) => e.code)).toEqual([]);
  });

  it('a failing handler on a message with 65,400 bytes of headers is retried within maxAttempts, then dead-lettered', async () => {
    let calls = 0;
    const consumer = k.consume(
      k.processor(
        () => {
          calls++;
          throw new Error('boom');
        },
        { maxAttempts: 3 },
      ),
      { requeueDelayMs: 100 },
    );
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    await consumer.start();
    await k.h.publishRaw({ n: 1 }, { messageId: 'big-retry', headers: { pad: 'x'.repeat(65_400) } });
    await waitFor('the dead-letter copy', async () => (await k.h.depth(k.h.deadLetterQueue)) === 1, 20_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 20_000);
    await consumer.stop();

    expect(calls).toBe(3);
    expect(await k.t.countEffects()).toBe(0);
    const [copy] = await k.h.drain(k.h.deadLetterQueue);
    const headers = copy!.properties.headers ?? {};
    expect(text(headers['x-inboxed-reason'])).toBe('max-attempts-exceeded');
    expect(text(headers['x-inboxed-attempt'])).toBe('3');
    expect(headers['x-inboxed-headers-dropped']).toEqual(['pad']);
    expect(k.recorder.counts()).toMatchObject({ retry: 2, 'dead-letter': 1 });
    expect(errors.map((e) => e.code)).toEqual([]);
  });

  it('a retry copy that cannot be encoded at all is dead-lettered instead (copy-unencodable), through a fresh confirm channel', async () => {
    const name = `${k.h.queue}-unencodable-retry`;
    const { connection, opened } = await connectionWithUnencodableCopies(k.h.url, name, (routingKey) => routingKey.includes('.retry.'));
    try {
      const consumer = k.consume(
        k.processor(() => {
          throw new Error('transient');
        }),
        { url: undefined, connection },
      );
      const dead: string[] = [];
      consumer.on('dead_letter', (o) => dead.push(`${o.messageId}:${o.reason}`));
      await consumer.start();
      await k.h.publishRaw({ n: 1 }, { messageId: 'r-1', headers: { note: 'original' } });
      await waitFor('the dead-letter copy', async () => (await k.h.depth(k.h.deadLetterQueue)) === 1, 20_000);
      await waitFor('everything settled', async () => (await k.h.pending()) === 0, 20_000);
      await consumer.stop();

      expect(dead).toEqual(['r-1:copy-unencodable']);
      const [copy] = await k.h.drain(k.h.deadLetterQueue);
      expect(text(copy!.properties.headers?.['x-inboxed-error-code'])).toBe('AMQP_COPY_UNENCODABLE');
      expect(text(copy!.properties.headers?.note)).toBe('original');
      expect(await deadLetterRows(k, 'r-1')).toBe(1);
      expect(await k.t.countEffects()).toBe(0);
      expect(opened.confirmChannels).toBe(3); // the first, and one fresh after each of the two throws (with, then without the original headers)
    } finally {
      await connection.close().catch(() => undefined);
    }
  });

  it('amqplib 0.10 order (confirm callback registered, then the encode throws): later confirms are not misattributed, a nacked copy never acks its original', async () => {
    const name = `${k.h.queue}-legacy`;
    const policy = uniqueName('amqp_copy_reject');
    // The 100 ms retry queue refuses every copy (nack): a retry to it must requeue its original, never ack it.
    await rabbitmqctl([
      'set_policy',
      policy,
      `^${k.h.retryQueues[0]!.replace(/\./g, '\\.')}$`,
      '{"max-length":0,"overflow":"reject-publish"}',
      '--apply-to',
      'queues',
    ]);
    const { connection } = await connectionWithUnencodableCopies(k.h.url, name, (_routingKey, options) => options.messageId === 'unencodable');
    try {
      await new Promise((resolve) => setTimeout(resolve, 500)); // the policy reaches the queue
      const consumer = k.consume(
        k.processor(
          (m) => {
            if (m.id === 'unencodable' || m.id === 'B') throw new PermanentError('poison');
            if (m.id === 'A') throw new Error('transient');
          },
          { backoff: { baseDelayMs: 50, maxDelayMs: 50 } },
        ),
        { url: undefined, connection, requeueDelayMs: 60_000, stopTimeoutMs: 1000 },
      );
      const errors: InboxError[] = [];
      consumer.on('error', (e) => errors.push(e));
      const events: string[] = [];
      consumer.on('retry', (o) => events.push(`retry:${o.messageId}`));
      consumer.on('dead_letter', (o) => events.push(`dead_letter:${o.messageId}`));
      await consumer.start();
      await k.h.publishRaw({ n: 0 }, { messageId: 'unencodable' });
      await waitFor('the unencodable copy reported', () => errors.some((e) => e.code === 'AMQP_COPY_UNENCODABLE'), 10_000);
      await k.h.publishRaw({ n: 1 }, { messageId: 'A' });
      await waitFor("A's copy refused", () => errors.some((e) => e.code === 'AMQP_PUBLISH_FAILED' && e.messageIds.includes('A')), 10_000);
      await k.h.publishRaw({ n: 2 }, { messageId: 'B' });
      await waitFor('B dead-lettered', () => events.includes('dead_letter:B'), 10_000);
      await consumer.stop();

      expect(events).toEqual(['dead_letter:B']);
      expect(errors.filter((e) => e.code === 'AMQP_COPY_UNENCODABLE')).toHaveLength(1);
      const dlq = (await k.h.drain(k.h.deadLetterQueue)).map((d) => d.properties.messageId);
      expect(dlq).toEqual(['B']);
      // Unacked at stop, so back in the work queue: the unencodable one (kept) and A (its copy was refused). B was acked.
      const back = (await k.h.drain(k.h.queue)).map((d) => d.properties.messageId).sort();
      expect(back).toEqual(['A', 'unencodable']);
      expect(await k.t.countEffects()).toBe(0);
    } finally {
      await rabbitmqctl(['clear_policy', policy]).catch(() => undefined);
      await connection.close().catch(() => undefined);
    }
  });

  it('a 300-byte message-id header, the largest header of a message over the budget, survives a retry: processed once, under that id', async () => {
    const id = `order-${'L'.repeat(294)}`; // valid (<= 512 bytes) but too long for properties.messageId
    const seen: string[] = [];
    const consumer = k.consume(
      k.processor((m) => {
        seen.push(m.id);
        if (seen.length === 1) throw new Error('transient');
      }),
      { requeueDelayMs: 100 },
    );
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    await consumer.start();
    // 875 headers of ~70 bytes each (smaller than the id header): with the copy's own headers they exceed 60 KiB.
    const small: Record<string, string> = {};
    for (let i = 0; i < 875; i++) small[`h${String(i).padStart(3, '0')}`] = 'v'.repeat(60);
    await k.h.publishRaw({ n: 1 }, { messageId: 'transport-uuid-1', headers: { 'message-id': id, ...small } });
    await waitFor('processed', async () => (await k.t.countEffects()) === 1, 20_000);
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 20_000);
    await consumer.stop();

    expect(seen).toEqual([id, id]); // the retry copy came back under the header id, not properties.messageId
    expect(await k.t.countEffects()).toBe(1);
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
    expect(k.recorder.counts()).toMatchObject({ retry: 1, processed: 1 });
    expect(errors.map((e) => e.code)).toEqual([]);
  });

  it('many small headers that fit are not dropped, and a retry of 8,500 boolean headers takes well under a second of event-loop time', async () => {
    const headers: Record<string, boolean> = {};
    for (let i = 0; i < 8_500; i++) headers[`b${i.toString(36)}`] = true; // ~58 KB encoded: fits the budget
    const received: Record<string, unknown>[] = [];
    const consumer = k.consume(
      k.processor((m) => {
        received.push(m.headers ?? {});
        if (received.length === 1) throw new Error('transient');
      }),
      { requeueDelayMs: 100 },
    );
    await consumer.start();
    let maxLagMs = 0;
    let last = performance.now();
    const probe = setInterval(() => {
      const now = performance.now();
      maxLagMs = Math.max(maxLagMs, now - last - 20);
      last = now;
    }, 20);
    try {
      await k.h.publishRaw({ n: 1 }, { messageId: 'bools', headers });
      await waitFor('processed', async () => (await k.t.countEffects()) === 1, 20_000);
    } finally {
      clearInterval(probe);
    }
    await consumer.stop();

    expect(maxLagMs).toBeLessThan(500);
    const copy = received[1]!;
    expect(copy['x-inboxed-headers-dropped']).toBeUndefined();
    expect(Object.keys(copy).filter((name) => /^b[0-9a-z]+$/.test(name))).toHaveLength(8_500);
  });

  it('a header amqplib cannot encode (a double of -1e19) drops only that header, and copies awaiting confirms on the channel are not failed', async () => {
    const consumer = k.consume(k.processor(), { requeueDelayMs: 200, prefetch: 100 });
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    const dead: string[] = [];
    consumer.on('dead_letter', (o) => dead.push(o.messageId));
    const count = 300;
    for (let i = 0; i < count; i++) {
      const bad = i % 30 === 15;
      await k.h.publishRaw(Buffer.from('not json'), {
        contentType: 'application/json',
        messageId: `${bad ? 'bad' : 'ok'}-${i}`,
        headers: bad ? ({ keep: 'me', score: { '!': 'double', value: -1e19 } } as Options.Publish['headers']) : { keep: 'me' },
      });
    }
    await consumer.start(); // the deliveries arrive together: many copies await their confirms at once
    await waitFor('everything settled', async () => (await k.h.pending()) === 0, 40_000);
    await consumer.stop();

    const dlq = await k.h.drain(k.h.deadLetterQueue);
    expect(dlq).toHaveLength(count); // one copy per message: none failed although the broker stored it
    expect(new Set(dlq.map((d) => d.properties.messageId)).size).toBe(count);
    expect(dead).toHaveLength(count);
    for (const copy of dlq) {
      const headers = copy.properties.headers ?? {};
      expect(text(headers.keep)).toBe('me');
      if (copy.properties.messageId!.startsWith('bad')) {
        expect(headers['x-inboxed-headers-dropped']).toEqual(['score']);
        expect(headers.score).toBeUndefined();
      } else {
        expect(headers['x-inboxed-headers-dropped']).toBeUndefined();
      }
    }
    const duplicated = await k.t.query<{ n: number }>(
      `select count(*)::int as n from (select message_id from "${k.t.schema}".inbox_dead_letters group by message_id having count(*) > 1) d`,
    );
    expect(duplicated[0]!.n).toBe(0);
    expect(errors.map((e) => e.code)).toEqual([]);
  });

  it('createAmqpMessageHandler consuming and publishing on one confirm channel keeps consuming after a message with an unencodable header', async () => {
    const connection = await amqp.connect(k.h.url);
    connection.on('error', () => {});
    try {
      const channel = await connection.createConfirmChannel();
      let channelClosed = false;
      channel.on('error', () => {});
      channel.on('close', () => (channelClosed = true));
      await channel.prefetch(10);
      const onMessage = createAmqpMessageHandler(
        channel,
        k.processor((m) => {
          if (m.id.startsWith('bad')) throw new PermanentError('poison');
        }),
        { queue: k.h.queue, retryDelaysMs: HARNESS_RETRY_DELAYS_MS, requeueDelayMs: 100 },
      );
      const errors: InboxError[] = [];
      onMessage.on('error', (e) => errors.push(e));
      const { consumerTag } = await channel.consume(k.h.queue, onMessage);
      await k.h.publishRaw({ n: 0 }, { messageId: 'bad-double', headers: { score: { '!': 'double', value: -1e19 } } as Options.Publish['headers'] });
      await waitFor('the dead-letter copy', async () => (await k.h.depth(k.h.deadLetterQueue)) === 1, 10_000);
      for (let i = 0; i < 5; i++) await k.h.publishRaw({ n: i }, { messageId: `good-${i}` });
      await waitFor('the good messages processed', async () => (await k.t.countEffects()) === 5, 10_000);
      await channel.cancel(consumerTag);
      await onMessage.drain(5_000);

      expect(channelClosed).toBe(false);
      const [copy] = await k.h.drain(k.h.deadLetterQueue);
      expect(copy!.properties.headers?.['x-inboxed-headers-dropped']).toEqual(['score']);
      expect(await k.h.pending()).toBe(0);
      expect(errors.map((e) => e.code)).toEqual([]);
    } finally {
      await connection.close().catch(() => undefined);
    }
  });

  it('a dead-letter exchange that does not exist (assertTopology: false): reconnects back off, the cause is reported once, nothing is lost', async () => {
    const queue = k.h.queue;
    const consumer = k.consume(
      k.processor((m) => {
        if (m.id === 'poison') throw new PermanentError('poison');
      }),
      {
        assertTopology: false,
        deadLetter: { exchange: uniqueName('amqp_missing_dlx') },
        requeueDelayMs: 100,
        reconnect: { baseDelayMs: 100, maxDelayMs: 800, jitter: 'none' },
      },
    );
    const lost: InboxError[] = [];
    consumer.on('error', (e) => {
      if (e.code === 'AMQP_CONNECTION_LOST' && !e.message.includes('reconnect attempt')) lost.push(e);
    });
    const delays: number[] = [];
    consumer.on('reconnect', ({ delayMs }) => delays.push(delayMs));
    await consumer.start();
    await k.h.publishRaw({}, { messageId: 'poison' });
    await k.h.publish(Array.from({ length: 20 }, (_, i) => ({ id: `ok-${i}`, payload: { i } })));
    await new Promise((resolve) => setTimeout(resolve, 4000));
    await consumer.stop();

    // Before: ~20 reconnects in 4 s at the base delay. Now each young session's loss doubles the wait, up to the cap.
    expect(delays.length).toBeGreaterThanOrEqual(2);
    expect(delays.length).toBeLessThanOrEqual(7);
    expect(delays).toEqual([...delays].sort((a, b) => a - b));
    expect(delays.at(-1)).toBeGreaterThanOrEqual(400);
    expect(lost).toHaveLength(1);
    expect(lost[0]!.details.amqpCode).toBe(404);
    expect(await k.h.depth(queue)).toBe(1); // the poison is kept, never acked without its copy
    expect((await k.effectsPerMessage()).size).toBe(20);
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
  });
});

// Defence in depth: a settle that throws where nothing should (here the test hook breaks the outcome
// after core validated it) must neither leave the delivery unacked for ever nor misreport it.
describe('RabbitMQ faults: a settle that throws unexpectedly', () => {
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp_settle');
  });
  afterEach(async () => {
    await k.close();
  });

  it('before its ack: the delivery is requeued (its prefetch slot freed), redelivered as a duplicate, and the error says so', async () => {
    let broken = false;
    const consumer = k.consume(k.processor(), {
      prefetch: 1,
      requeueDelayMs: 100,
      beforeSettle: (outcome) => {
        if (outcome.messageId !== 'bad' || broken) return;
        broken = true;
        breakNextRead(outcome, 'status');
      },
    });
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    await consumer.start();
    await k.h.publishRaw({ n: 0 }, { messageId: 'bad' });
    for (let i = 0; i < 3; i++) await k.h.publishRaw({ n: i }, { messageId: `ok-${i}` });

    // With prefetch 1, a delivery stuck unacked would stop everything behind it.
    await k.recorder.waitFor('bad', { status: 'duplicate', timeoutMs: 15_000 });
    for (let i = 0; i < 3; i++) await k.recorder.waitFor(`ok-${i}`, { status: 'processed' });
    await waitFor('work queue empty, nothing unacked', async () => (await k.h.pending()) === 0, 15_000);
    await consumer.stop();

    expect(broken).toBe(true);
    const settle = errors.filter((e) => e.code === 'AMQP_SETTLE_FAILED');
    expect(settle).toHaveLength(1);
    expect(settle[0]!.message).toContain('settling a delivery threw unexpectedly; it was requeued');
    expect(settle[0]!.message).toContain('reading status boom');
    expect(settle[0]!.messageIds).toEqual(['bad']);
    expect(Object.fromEntries(await k.effectsPerMessage())).toEqual({ bad: 1, 'ok-0': 1, 'ok-1': 1, 'ok-2': 1 });
    expect(await k.h.depth(k.h.deadLetterQueue)).toBe(0);
  });

  it('after its ack: not requeued again (no redelivery), and the error says it had already been acked', async () => {
    const consumer = k.consume(k.processor(), {
      prefetch: 1,
      requeueDelayMs: 100,
      beforeSettle: (outcome) => {
        // Read only once the ack went out (the outcome event's log line reads it).
        if (outcome.messageId === 'late') breakNextRead(outcome, 'reason');
      },
    });
    const errors: InboxError[] = [];
    consumer.on('error', (e) => errors.push(e));
    await consumer.start();
    await k.h.publishRaw({ n: 0 }, { messageId: 'late' });
    await k.h.publishRaw({ n: 1 }, { messageId: 'ok-1' });

    await k.recorder.waitFor('ok-1', { status: 'processed' });
    await waitFor('work queue empty, nothing unacked', async () => (await k.h.pending()) === 0, 15_000);
    await sleep(500);
    await consumer.stop();

    const settle = errors.filter((e) => e.code === 'AMQP_SETTLE_FAILED');
    expect(settle).toHaveLength(1);
    expect(settle[0]!.message).toContain('it had already been acked');
    expect(settle[0]!.messageIds).toEqual(['late']);
    // Acked once, never redelivered: one processed outcome, no duplicate.
    expect(k.recorder.outcomes.filter((o) => o.messageId === 'late').map((o) => o.status)).toEqual(['processed']);
    expect(Object.fromEntries(await k.effectsPerMessage())).toEqual({ late: 1, 'ok-1': 1 });
    expect(await k.h.pending()).toBe(0);
  });
});
