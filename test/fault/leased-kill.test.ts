import { migrate } from '@inboxed/core';
import { createTestDatabase, databaseUrl, type FakePaymentProvider, startFakePaymentProvider, type TestDatabase, waitFor } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpHarness, createHarness } from '../../packages/amqp/test/harness.js';
import { startWorker, type Worker } from '../conformance/workers.js';

/** Long enough that, on a loaded machine, the copy meets the lease still live (it took 1.5 s to get there once). */
const LEASE_MS = 3_000;
const CONSUMER = 'amqp.leased-kill';

/**
 * Leased mode across processes, on RabbitMQ: a worker is SIGKILLed inside its call to the payment
 * provider (claim committed, charge made, response not yet back), and another process finishes the
 * message. Everything is asked of the database, the broker and the provider, not of the workers.
 */
describe('leased mode: a worker SIGKILLed inside the provider call', () => {
  let t: TestDatabase;
  let h: AmqpHarness;
  let provider: FakePaymentProvider;
  const workers: Worker[] = [];

  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: 'leased_kill' });
    await migrate(t.db, { schema: t.schema });
    h = createHarness();
    await h.setup();
    // The first POST of a key charges at once and then holds its response for a minute: the worker
    // sits in the call, charged without knowing it. Everything else answers at once.
    provider = await startFakePaymentProvider({ latencyMs: (r) => (r.method === 'POST' && r.nth === 1 ? 60_000 : 0), chargeAt: 0 });
  });
  afterEach(async () => {
    for (const worker of workers.splice(0)) {
      worker.kill('SIGKILL');
      await worker.exited;
    }
    await provider.close();
    await h.teardown();
    await t.close();
  });

  const row = async (id: string) =>
    (
      await t.query<{ status: string; fencing_token: number; leased: boolean; result: string | null }>(
        `select status, fencing_token, lease_expires_at > now() as leased, result from "${t.schema}".inbox where consumer = '${CONSUMER}' and message_id = '${id}'`,
      )
    )[0];
  const lines = (worker: Worker, prefix: string) =>
    worker
      .output()
      .split('\n')
      .filter((line) => line.startsWith(prefix));

  it('the copy meeting the live lease is busy (parked, not done); after the lease the other process takes over with the same idempotency key, finds the charge and completes once', async () => {
    const env = {
      ...h.workerEnv(),
      BROKER: 'amqp',
      DATABASE_URL: databaseUrl(),
      SCHEMA: t.schema,
      CONSUMER_NAME: CONSUMER,
      MODE: 'leased',
      LEASE_MS: String(LEASE_MS),
      PROVIDER_URL: provider.url,
      WORK_MS: '20',
    };
    // Two identical processes on the queue, both ready before the message exists: whichever gets it
    // is killed, and RabbitMQ hands the unacked delivery to the other at once, inside the lease.
    workers.push(startWorker(env), startWorker(env));
    await Promise.all(workers.map((w) => w.waitFor('ready')));
    await h.publish([{ id: 'pay-1', payload: { n: 1199 } }]);

    const victim = await waitFor('a worker in the provider call', () => workers.find((w) => w.output().includes('charging pay-1 ')), 15_000);
    const survivor = workers.find((w) => w !== victim)!;
    const key = /^charging pay-1 key=(\S+)$/m.exec(victim.output())![1]!;
    await waitFor('the provider made the charge', () => provider.chargesFor(key) === 1, 5_000, 5);
    // The claim committed before the call: another connection sees it, leased, token 1.
    expect(await row('pay-1')).toMatchObject({ status: 'processing', fencing_token: 1, leased: true });
    expect(lines(victim, 'handling pay-1 ')).toEqual([`handling pay-1 token=1 takeover=false key=${key}`]);

    victim.kill('SIGKILL');
    expect((await victim.exited).signal).toBe('SIGKILL');

    // The redelivered copy meets the live lease: busy. It is parked in a retry queue (never acked as
    // done: the broker still holds it) and the claim is untouched.
    await survivor.waitFor('settling busy pay-1', 5_000);
    // Read from the log up to the busy line: once the lease runs out the parked copy may come back
    // and run before the next assertion does.
    const untilBusy = survivor.output().split('settling busy pay-1')[0]!;
    expect(untilBusy.split('\n').filter((line) => line.startsWith('handling '))).toEqual([]); // its handler did not run while the lease lived
    expect(await h.pending()).toBeGreaterThan(0);

    // Once the lease ran out (server time), the copy's next delivery takes the claim over.
    await survivor.waitFor('settling processed pay-1', 20_000);
    expect(lines(survivor, 'handling pay-1 ')).toEqual([`handling pay-1 token=2 takeover=true key=${key}`]);
    const charge = provider.chargeFor(key)!;
    expect(lines(survivor, 'found pay-1 ')).toEqual([`found pay-1 charge=${charge.id}`]);
    expect(lines(survivor, 'charging ')).toEqual([]); // reconciled by the key: no second POST

    // Completed exactly once, by the second process's claim.
    const done = await row('pay-1');
    expect(done).toMatchObject({ status: 'processed', fencing_token: 2, leased: null });
    expect(JSON.parse(done!.result!)).toEqual({ chargeId: charge.id });
    expect(await t.countEffects('pay-1')).toBe(1);
    const settled = workers.flatMap((w) => w.settling).filter(([, id]) => id === 'pay-1');
    expect(settled.filter(([status]) => status === 'processed')).toHaveLength(1);
    expect(settled.every(([status]) => status === 'busy' || status === 'processed')).toBe(true);
    expect(lines(victim, 'settling ')).toEqual([]);

    // One charge at the provider, for this key and in all; one POST, the takeover's lookup.
    expect(provider.chargesFor(key)).toBe(1);
    expect(provider.totalCharges()).toBe(1);
    expect(charge).toMatchObject({ amountCents: 1299, reference: 'pay-1' });
    expect(provider.requestsFor(key)).toEqual({ posts: 1, lookups: 1 });

    // A late duplicate is acked as one, without the handler; the queue ends empty, nothing dead-lettered.
    await h.publish([{ id: 'pay-1', payload: { n: 1199 } }]);
    await survivor.waitFor('settling duplicate pay-1', 10_000);
    await waitFor('the queue drained', async () => (await h.pending()) === 0, 15_000);
    expect(await h.deadLetters()).toEqual([]);
    expect(lines(survivor, 'handling ')).toHaveLength(1);
    expect(provider.totalCharges()).toBe(1);
  });
});
