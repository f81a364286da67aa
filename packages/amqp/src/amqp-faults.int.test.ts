import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { databaseUrl, waitFor } from '@inboxed/test-support';
import { withInbox } from '@inboxed/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createAmqpFixture, type AmqpFixture } from '../test/amqp-fixture.js';
import { amqpUrl } from '../test/amqp-test-broker.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('RabbitMQ faults: crashes, server-side disconnects, stop under load', () => {
  let f: AmqpFixture;
  let child: ChildProcess | undefined;
  beforeEach(async () => {
    f = await createAmqpFixture('amqp_fault');
  });
  afterEach(async () => {
    child?.kill('SIGKILL');
    child = undefined;
    await f.close();
  });

  it('SIGKILL after the commit and before the ack: the redelivery is a duplicate, exactly 1 effect', async () => {
    await f.broker.publish(f.queue, { orderId: 1 }, { messageId: 'crash-1' });
    const script = fileURLToPath(new URL('../test/amqp-crash-consumer.ts', import.meta.url));
    child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', script], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env: { ...process.env, AMQP_URL: amqpUrl(), DATABASE_URL: databaseUrl(), SCHEMA: f.t.schema, QUEUE: f.queue },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    child.stdout!.on('data', (chunk) => (output += String(chunk)));
    await waitFor('the child to commit', () => output.includes('committed crash-1 processed'), 30_000);
    // Committed in PostgreSQL, not yet acked in RabbitMQ.
    expect(await f.t.countEffects('crash-1')).toBe(1);
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    child = undefined;

    // Restart (in this process, on the same inbox): the broker redelivers the unacked message.
    const restarted = f.consume({
      handler: f.recorder.wrap(
        withInbox(
          async (message, tx: any) => {
            await tx.insert(f.t.effects).values({ messageId: message.id });
          },
          { db: f.t.db, consumer: 'crash-consumer', tables: { schema: f.t.schema } },
        ),
      ),
    });
    await restarted.start();
    const outcome = await f.recorder.waitFor('crash-1', { timeoutMs: 20_000 });
    await restarted.stop();
    expect(outcome.status).toBe('duplicate');
    expect(await f.t.countEffects('crash-1')).toBe(1);
    expect(await f.broker.depth(f.queue)).toBe(0);
  });

  it('the server closes the connection mid-stream: the consumer reconnects and every message is processed exactly once', async () => {
    const total = 300;
    const consumer = f.consume({
      handler: f.processor(() => sleep(5)),
      prefetch: 16,
      connectionName: `${f.queue}-conn`,
      reconnect: { baseDelayMs: 100, maxDelayMs: 1000 },
    });
    const reconnects: number[] = [];
    consumer.on('reconnect', ({ attempt }) => reconnects.push(attempt));
    await consumer.start();
    for (let i = 0; i < total; i++)
      f.broker.channel.sendToQueue(f.queue, Buffer.from(JSON.stringify({ n: i })), { messageId: `m-${i}`, contentType: 'application/json', persistent: true });
    await f.broker.channel.waitForConfirms();

    await f.recorder.waitForCount(50, (o) => o.status === 'processed', 30_000);
    expect(await f.broker.closeConnectionsNamed(`${f.queue}-conn`)).toBe(1);
    await waitFor('a reconnect', () => reconnects.length > 0, 30_000);
    await waitFor('every message processed', async () => (await f.effectsPerMessage()).size === total, 60_000);
    await waitFor('the queue to drain', async () => (await f.broker.depth(f.queue)) === 0, 30_000);
    await consumer.stop();

    const perMessage = await f.effectsPerMessage();
    expect(perMessage.size).toBe(total);
    expect([...perMessage.values()].every((n) => n === 1)).toBe(true);
    expect(await f.t.countEffects()).toBe(total);
    expect(f.recorder.counts().processed).toBe(total);
    expect(await f.broker.depth(f.queue)).toBe(0);
    expect(consumer.status).toBe('stopped');
  });

  it('stop() under load loses and doubles nothing; a restarted consumer finishes the rest exactly once', async () => {
    const total = 400;
    const first = f.consume({ handler: f.processor(() => sleep(10)), prefetch: 32 });
    await first.start();
    for (let i = 0; i < total; i++)
      f.broker.channel.sendToQueue(f.queue, Buffer.from(JSON.stringify({ n: i })), { messageId: `s-${i}`, contentType: 'application/json', persistent: true });
    await f.broker.channel.waitForConfirms();
    await f.recorder.waitForCount(60, (o) => o.status === 'processed', 30_000);
    await first.stop();

    // Everything committed was acked, everything else is back in the queue: nothing in between.
    const committed = await f.t.countEffects();
    expect(committed).toBeGreaterThanOrEqual(60);
    expect(committed).toBeLessThan(total);
    expect(f.recorder.counts().processed).toBe(committed);
    expect(await f.broker.depth(f.queue)).toBe(total - committed);

    const second = f.consume({ handler: f.processor() });
    await second.start();
    await waitFor('the rest processed', async () => (await f.t.countEffects()) === total, 60_000);
    await waitFor('the queue to drain', async () => (await f.broker.depth(f.queue)) === 0, 30_000);
    await second.stop();
    const perMessage = await f.effectsPerMessage();
    expect(perMessage.size).toBe(total);
    expect([...perMessage.values()].every((n) => n === 1)).toBe(true);
    expect(f.recorder.counts()).toEqual({ processed: total });
  });

  it('the broker cancels the consumer (queue deleted): it re-subscribes once the queue is back', async () => {
    const consumer = f.consume({ handler: f.processor(), reconnect: { baseDelayMs: 100, maxDelayMs: 300 } });
    const codes: string[] = [];
    consumer.on('error', (e) => codes.push(String(e.code)));
    let reconnected = false;
    consumer.on('reconnect', () => (reconnected = true));
    await consumer.start();
    await f.broker.publish(f.queue, { n: 1 }, { messageId: 'before' });
    await f.recorder.waitFor('before', { status: 'processed' });
    await f.broker.channel.deleteQueue(f.queue);
    await waitFor('the cancel to be noticed', () => codes.includes('AMQP_CONSUMER_CANCELLED'), 20_000);
    await f.broker.declareQueue(f.queue);
    await waitFor('a reconnect', () => reconnected, 20_000);
    await f.broker.publish(f.queue, { n: 2 }, { messageId: 'after' });
    await f.recorder.waitFor('after', { status: 'processed', timeoutMs: 20_000 });
    await consumer.stop();
    expect(await f.t.countEffects()).toBe(2);
    expect(consumer.status).toBe('stopped');
  });
});
