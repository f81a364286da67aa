import type { ConsumerStatus, InboxLogger } from '@inboxed/core/adapter';
import { waitFor } from '@inboxed/test-support';
import amqp from 'amqplib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpTestKit, createAmqpTestKit } from '../test/amqp-test-kit.js';

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
