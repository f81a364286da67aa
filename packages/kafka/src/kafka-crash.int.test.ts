import { migrate, withInbox, type InboxMessage } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, databaseUrl, uniqueName, waitFor, type TestDatabase } from '@inboxed/test-support';
import type { Kafka } from 'kafkajs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { brokerOptions, committedOffsets, createTopic, produce, spawnChildConsumer, testKafka, type ChildConsumer } from '../test/kafka-test-kit.js';
import { createKafkaConsumer, type KafkaInboxConsumer } from './index.js';

// Consumers die for real here: child processes SIGKILLed at chosen points, while another member
// of the same group (in this process, or another child) takes over from the committed offsets.
describe('crashes and rebalances', () => {
  let t: TestDatabase;
  let kafka: Kafka;
  let topic: string;
  let groupId: string;
  const children: ChildConsumer[] = [];
  const running: KafkaInboxConsumer[] = [];

  beforeEach(async () => {
    t = await createTestDatabase('node-postgres');
    await migrate(t.db, { schema: t.schema });
    kafka = testKafka();
    topic = uniqueName('crash');
    groupId = uniqueName('group');
  });
  afterEach(async () => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
    await Promise.all(running.splice(0).map((c) => c.stop()));
    await t.close();
  });

  const childEnv = (extra: Record<string, string> = {}) => ({
    DATABASE_URL: databaseUrl(),
    SCHEMA: t.schema,
    TOPIC: topic,
    GROUP_ID: groupId,
    CONSUMER: 'billing',
    ...extra,
  });

  const duplicatedEffects = () =>
    t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${t.schema}".effects group by message_id having count(*) > 1`);

  it('SIGKILL after the database commit and before the offset commit: the member taking over sees a duplicate, one effect', async () => {
    await createTopic(kafka, topic, 1);
    await produce(kafka, topic, [{ id: 'pay-1', value: { amount: 5 } }]);
    const child = spawnChildConsumer(childEnv({ CRASH: 'before-commit' }));
    children.push(child);
    await child.waitForLine(/^crashing pay-1$/);
    expect(await child.exited).toMatchObject({ signal: 'SIGKILL' });
    expect(child.lines).toContain('processed pay-1');
    expect(await t.countEffects('pay-1')).toBe(1);
    expect(await committedOffsets(kafka, groupId, topic)).toEqual({ 0: -1 });

    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(async (message: InboxMessage, tx: any) => void (await tx.insert(t.effects).values({ messageId: message.id })), {
        db: t.db,
        consumer: 'billing',
        tables: { schema: t.schema },
      }),
    );
    const survivor = createKafkaConsumer({ kafka, groupId, topics: [topic], handler: processor, ...brokerOptions() });
    running.push(survivor);
    await survivor.start();
    const outcome = await recorder.waitFor('pay-1', { timeoutMs: 30_000 });
    expect(outcome.status).toBe('duplicate');
    expect(await t.countEffects('pay-1')).toBe(1);
    await waitFor('offset committed past pay-1', async () => (await committedOffsets(kafka, groupId, topic))[0] === 1);
  });

  it('two members of one group, one SIGKILLed mid-stream: every record has exactly one effect', async () => {
    const total = 240;
    await createTopic(kafka, topic, 4);
    await produce(
      kafka,
      topic,
      Array.from({ length: total }, (_, i) => ({ id: `pay-${i}`, value: { n: i }, partition: i % 4 })),
    );
    const first = spawnChildConsumer(childEnv({ DELAY_MS: '15' }));
    const second = spawnChildConsumer(childEnv({ DELAY_MS: '15' }));
    children.push(first, second);
    // Kill one member once both have been doing work, so it dies with records in flight.
    await Promise.all([first.waitForLine(/^processed /), second.waitForLine(/^processed /)]);
    await waitFor('some progress', async () => (await t.countEffects()) >= 40);
    first.kill('SIGKILL');
    expect(await first.exited).toMatchObject({ signal: 'SIGKILL' });

    await waitFor(
      'every record applied',
      async () => (await t.query<{ n: number }>(`select count(distinct message_id)::int as n from "${t.schema}".effects`))[0]!.n === total,
      60_000,
    );
    expect(await duplicatedEffects()).toEqual([]);
    expect(await t.countEffects()).toBe(total);
    await waitFor(
      'offsets committed to the end of every partition',
      async () => Object.values(await committedOffsets(kafka, groupId, topic)).every((offset) => offset === total / 4),
      30_000,
    );
    // The survivor took over the killed member's partitions: it settled records of all four.
    const settledBySurvivor = second.lines.filter((line) => /^(processed|duplicate) pay-\d+$/.test(line)).map((line) => Number(line.split('-')[1]) % 4);
    expect(new Set(settledBySurvivor)).toEqual(new Set([0, 1, 2, 3]));
  });

  it('work finishing after its partition was revoked does not commit over the new owner', async () => {
    await createTopic(kafka, topic, 1);
    await produce(
      kafka,
      topic,
      Array.from({ length: 6 }, (_, i) => ({ id: `pay-${i}`, value: { n: i } })),
    );
    const handler = async (message: InboxMessage, tx: any) => void (await tx.insert(t.effects).values({ messageId: message.id }));
    const options = { db: t.db, consumer: 'billing', tables: { schema: t.schema } };

    // The first member applies pay-0, then stalls before its offset commit long enough to be
    // expelled from the group (no heartbeats while it stalls).
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let stalled: () => void = () => {};
    const isStalled = new Promise<void>((resolve) => (stalled = resolve));
    const staleErrors: string[] = [];
    const stale = createKafkaConsumer({
      kafka,
      groupId,
      topics: [topic],
      handler: withInbox(handler, options),
      ...brokerOptions(),
      beforeCommit: async ({ offset }) => {
        if (offset !== '0') return;
        stalled();
        await released;
      },
    });
    stale.on('error', (error) => staleErrors.push(String(error.code)));
    running.push(stale);
    await stale.start();
    await isStalled;

    // The new owner replays pay-0 as a duplicate and commits to the end.
    const recorder = createOutcomeRecorder();
    const owner = createKafkaConsumer({ kafka, groupId, topics: [topic], handler: recorder.wrap(withInbox(handler, options)), ...brokerOptions() });
    running.push(owner);
    await owner.start();
    expect((await recorder.waitFor('pay-0', { timeoutMs: 30_000 })).status).toBe('duplicate');
    await recorder.waitFor('pay-5', { status: 'processed' });
    await waitFor('the new owner committed to the end', async () => (await committedOffsets(kafka, groupId, topic))[0] === 6);

    // The stale member wakes up and finishes: its offset 1 must not overwrite the owner's 6.
    // (The owner leaves first, so the stale member's rejoin does not wait on it.)
    await owner.stop();
    release();
    await stale.stop();
    expect(await committedOffsets(kafka, groupId, topic)).toEqual({ 0: 6 });
    expect(await t.countEffects()).toBe(6);
    expect(await duplicatedEffects()).toEqual([]);
    // The broker refused the stale commit (or the adapter skipped it after seeing the rebalance).
    expect(staleErrors.filter((code) => code !== 'KAFKA_COMMIT_FAILED' && code !== 'KAFKA_CONSUMER_CRASHED')).toEqual([]);
  });

  it('a member that keeps heartbeating through other partitions never commits a revoked partition over its new owner', async () => {
    await createTopic(kafka, topic, 2);
    await produce(
      kafka,
      topic,
      Array.from({ length: 20 }, (_, i) => ({ id: `pay-${i}`, value: { n: i }, partition: i % 2 })),
    );
    const handler = async (message: InboxMessage, tx: any) => void (await tx.insert(t.effects).values({ messageId: message.id }));
    const options = { db: t.db, consumer: 'billing', tables: { schema: t.schema } };

    // The first member stalls before committing partition 0's first record while partition 1
    // keeps it busy (and heartbeating) on a second worker.
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let stalled: () => void = () => {};
    const isStalled = new Promise<void>((resolve) => (stalled = resolve));
    const firstErrors: string[] = [];
    const first = createKafkaConsumer({
      kafka,
      groupId,
      topics: [topic],
      handler: withInbox(handler, options),
      ...brokerOptions(),
      partitionsConsumedConcurrently: 2,
      beforeCommit: async ({ partition, offset }) => {
        if (partition !== 0 || offset !== '0') return;
        stalled();
        await released;
      },
    });
    first.on('error', (error) => firstErrors.push(String(error.code)));
    running.push(first);
    await first.start();
    await isStalled;

    const recorder = createOutcomeRecorder();
    const second = createKafkaConsumer({ kafka, groupId, topics: [topic], handler: recorder.wrap(withInbox(handler, options)), ...brokerOptions() });
    running.push(second);
    await second.start();
    // Whoever owns partition 0 now replays pay-0 as a duplicate and commits it to the end.
    await waitFor('every record applied', async () => (await t.countEffects()) === 20, 40_000);
    await waitFor('partition 0 committed to the end', async () => (await committedOffsets(kafka, groupId, topic))[0] === 10, 40_000);

    await second.stop();
    release();
    await first.stop();
    const committed = await committedOffsets(kafka, groupId, topic);
    expect(committed[0]).toBe(10);
    expect(await duplicatedEffects()).toEqual([]);
    expect(firstErrors.filter((code) => code !== 'KAFKA_COMMIT_FAILED' && code !== 'KAFKA_CONSUMER_CRASHED')).toEqual([]);
  });
});
