import { withInbox, type InboxMessage } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { databaseUrl, waitFor } from '@inboxed/test-support';
import { afterEach, describe, expect, it } from 'vitest';
import type { PublishedMessage } from '../../../test/conformance/harness.js';
import { startWorker, type Worker } from '../../../test/conformance/workers.js';
import { useKafkaTestKit } from '../test/kafka-test-kit.js';
import { createKafkaConsumer } from './index.js';

// Members die and join while records are in flight: SIGKILLed worker processes (the shared
// conformance worker), and members that stall past their partition's revocation. Checked against
// the database and the broker's committed offsets and dead-letter topic.
describe('rebalances', () => {
  const k = useKafkaTestKit({ label: 'kafka_rebalance' });
  const workers: Worker[] = [];
  afterEach(() => {
    for (const worker of workers.splice(0)) worker.kill('SIGKILL');
  });

  const effects = async () =>
    Object.fromEntries(
      (await k.t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${k.t.schema}".effects group by 1`)).map((r) => [
        r.message_id,
        Number(r.n),
      ]),
    );
  const processor = (options: { delayMs?: number } = {}) =>
    withInbox(
      async (message: InboxMessage, tx: any) => {
        if (options.delayMs) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
        await tx.insert(k.t.effects).values({ messageId: message.id });
      },
      { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
    );

  it('members SIGKILLed and replaced mid-stream: once the group refuses a commit, a member commits and dead-letters nothing more of that generation', async () => {
    // Every third record is not JSON: the adapter dead-letters it itself (no inbox row), so each
    // one handled again after a refused commit writes another dead-letter record.
    const total = 3_000;
    const records: PublishedMessage[] = Array.from({ length: total }, (_, i) =>
      i % 3 === 0 ? { id: `bad-${i}`, body: `{"n": ${i}` } : { id: `pay-${i}`, payload: { n: i } },
    );
    await k.h.publish(records);
    const env = { ...k.h.workerEnv(), BROKER: 'kafka', DATABASE_URL: databaseUrl(), SCHEMA: k.t.schema, CONSUMER_NAME: 'billing' };
    const spawn = () => {
      const worker = startWorker(env);
      workers.push(worker);
      return worker;
    };
    const members = [spawn(), spawn(), spawn()];
    await Promise.all(members.map((w) => w.waitFor('ready', 30_000)));
    // Three times, while all are busy: kill a member and start a new one. Each kill is two
    // rebalances: the newcomer joins at once, the dead member leaves at its session timeout.
    const kills = 3;
    for (let kill = 0; kill < kills; kill++) {
      await waitFor('progress', async () => Object.keys(await effects()).length >= ((kill + 1) * total) / 8, 60_000);
      members[kill]!.kill('SIGKILL');
      await members[kill]!.exited;
      members.push(spawn());
    }
    await waitFor('every record settled', async () => (await k.h.pending()) === 0, 120_000);

    const applied = await effects();
    expect(Object.keys(applied).sort()).toEqual(
      records
        .filter((r) => r.payload !== undefined)
        .map((r) => r.id!)
        .sort(),
    );
    expect(Object.values(applied).every((n) => n === 1)).toBe(true);
    const dead = await k.h.deadLetterRecords();
    expect(new Set(dead.map((r) => r.headerText['x-inboxed-message-id']))).toEqual(new Set(records.filter((r) => r.body !== undefined).map((r) => r.id)));
    const originals = new Set(dead.map((r) => `${r.headerText['x-inboxed-original-partition']}/${r.headerText['x-inboxed-original-offset']}`));
    const duplicateDeadLetters = dead.length - originals.size;
    const refused = workers
      .flatMap((w) => w.output().split('\n'))
      .filter((line) => line.startsWith('error KAFKA_COMMIT_FAILED') && line.includes('the group refused')).length;
    process.stdout.write(`kafka kill/rebalance run: ${kills} SIGKILLs, ${refused} refused commits, ${duplicateDeadLetters} duplicate dead-letter records\n`);
    // A fenced member stops at once: at most one refused commit per partition it works on at a
    // time (3), per member alive at once (4), per group generation (9: three first joins, two
    // rebalances per kill). Before the fence the same run had 259-337.
    expect(refused).toBeLessThanOrEqual(3 * 4 * (3 + 2 * kills));
    // A dead-letter record is written again only for a record whose commit was refused, or that a
    // killed member had dead-lettered but not committed (at most 3 in flight each).
    expect(duplicateDeadLetters).toBeLessThanOrEqual(refused + 3 * kills);
  }, 240_000);

  it('work finishing after its partition was revoked does not commit over the new owner', async () => {
    await k.h.produce(Array.from({ length: 6 }, (_, i) => ({ id: `pay-${i}`, value: { n: i }, partition: 0 })));
    // The first member applies pay-0, then stalls before settling it long enough to be expelled
    // from the group (no heartbeats while it stalls).
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let stalled: () => void = () => {};
    const isStalled = new Promise<void>((resolve) => (stalled = resolve));
    const staleErrors: string[] = [];
    const stale = createKafkaConsumer({
      ...k.h.options(processor()),
      partitionsConsumedConcurrently: 1,
      beforeSettle: async (outcome) => {
        if (outcome.messageId !== 'pay-0') return;
        stalled();
        await released;
      },
    });
    stale.on('error', (error) => staleErrors.push(String(error.code)));
    k.track(stale);
    await stale.start();
    await isStalled;

    // The new owner replays pay-0 as a duplicate and commits to the end.
    const recorder = createOutcomeRecorder();
    const owner = createKafkaConsumer(k.h.options(recorder.wrap(processor())));
    k.track(owner);
    await owner.start();
    expect((await recorder.waitFor('pay-0', { timeoutMs: 30_000 })).status).toBe('duplicate');
    await recorder.waitFor('pay-5', { status: 'processed' });
    await waitFor('the new owner committed to the end', async () => (await k.h.committed())[0] === 6);

    // The stale member wakes up: its offset 1 must not overwrite the owner's 6.
    await owner.stop();
    release();
    await stale.stop();
    expect((await k.h.committed())[0]).toBe(6);
    expect(await effects()).toEqual(Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`pay-${i}`, 1])));
    // The broker refused the stale commit, or the adapter skipped it after seeing the rebalance.
    expect(staleErrors.filter((code) => code !== 'KAFKA_COMMIT_FAILED' && code !== 'KAFKA_CONSUMER_CRASHED')).toEqual([]);
  });

  it('a member that keeps heartbeating through other partitions never commits a revoked partition over its new owner', async () => {
    await k.h.produce(Array.from({ length: 20 }, (_, i) => ({ id: `pay-${i}`, value: { n: i }, partition: i % 2 })));
    // The first member stalls before settling partition 0's first record while partition 1 keeps
    // it busy (and heartbeating) on a second worker.
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let stalled: () => void = () => {};
    const isStalled = new Promise<void>((resolve) => (stalled = resolve));
    const firstErrors: string[] = [];
    const first = createKafkaConsumer({
      ...k.h.options(processor()),
      partitionsConsumedConcurrently: 2,
      beforeSettle: async (outcome) => {
        if (outcome.messageId !== 'pay-0') return;
        stalled();
        await released;
      },
    });
    first.on('error', (error) => firstErrors.push(String(error.code)));
    k.track(first);
    await first.start();
    await isStalled;

    const second = createKafkaConsumer(k.h.options(processor()));
    k.track(second);
    await second.start();
    // Whoever owns partition 0 now replays pay-0 as a duplicate and commits it to the end.
    await waitFor('every record applied', async () => Object.keys(await effects()).length === 20, 40_000);
    await waitFor('partition 0 committed to the end', async () => (await k.h.committed())[0] === 10, 40_000);

    await second.stop();
    release();
    await first.stop();
    expect((await k.h.committed())[0]).toBe(10);
    expect(Object.values(await effects()).every((n) => n === 1)).toBe(true);
    expect(firstErrors.filter((code) => code !== 'KAFKA_COMMIT_FAILED' && code !== 'KAFKA_CONSUMER_CRASHED')).toEqual([]);
  });
});
