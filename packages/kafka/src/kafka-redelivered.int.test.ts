import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type AnyInboxProcessor, type InboxMessage, withInbox, withInboxBatch, wrapProcessor } from '@inboxed/core';
import { watchOutput } from '@inboxed/test-support/child-output';
import { databaseUrl, waitFor } from '@inboxed/test-support';
import { afterEach, describe, expect, it } from 'vitest';
import { type KafkaTestKit, useKafkaTestKit } from '../test/kafka-test-kit.js';

// Kafka has no redelivery flag: the adapter hands over `redelivered: true` the records that may
// have been in flight in a process that died, i.e. the first call's worth of every partition after
// it was assigned (and the replay of a held partition). Core counts their attempts before they
// run, so a record that kills the process every time is dead-lettered after maxAttempts deaths.

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const workerScript = fileURLToPath(new URL('../test/fixtures/poison-worker.ts', import.meta.url));

/** Effects per message id. */
const effectsOf = async (k: KafkaTestKit) =>
  Object.fromEntries(
    (await k.t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${k.t.schema}".effects group by 1`)).map((r) => [
      r.message_id,
      Number(r.n),
    ]),
  );

/** The attempts ledger: `id:attempts:last error code` per row. */
const attemptsOf = async (k: KafkaTestKit) =>
  (
    await k.t.query<{ message_id: string; attempts: number; last_error_code: string | null }>(
      `select message_id, attempts, last_error_code from "${k.t.schema}".inbox_attempts order by message_id`,
    )
  ).map((r) => `${r.message_id}:${r.attempts}:${r.last_error_code}`);

describe('records that may have been in flight when a process died are handed over redelivered', () => {
  const k = useKafkaTestKit({ partitions: 2, label: 'kafka_redelivered' });

  /** A processor recording `id:redelivered` for every message it is handed. */
  const recording = (seen: string[], processor: AnyInboxProcessor): AnyInboxProcessor =>
    processor.kind === 'batch'
      ? wrapProcessor(processor, (messages, next) => {
          for (const m of messages) seen.push(`${m.id}:${m.redelivered === true}`);
          return next(messages);
        })
      : wrapProcessor(processor, (message, next) => {
          seen.push(`${message.id}:${message.redelivered === true}`);
          return next(message);
        });

  it('batch processor: the first batchSize records of each partition after every start, and no later ones; each applied once, nothing left counted', async () => {
    const options = { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } };
    const batch = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id })));
    }, options);
    const p0 = Array.from({ length: 11 }, (_, i) => `p0-${i}`);
    const p1 = ['p1-0', 'p1-1'];
    await k.h.produce([...p0.slice(0, 7).map((id) => ({ id, value: { id }, partition: 0 })), ...p1.map((id) => ({ id, value: { id }, partition: 1 }))]);

    const first: string[] = [];
    const consumer = await k.start(recording(first, batch), { batchSize: 3 });
    await waitFor('both partitions committed to the end', async () => {
      const committed = await k.h.committed();
      return committed[0] === 7 && committed[1] === 2;
    });
    await consumer.stop();
    // Partition 0: the first call (p0-0..2) marked, the next ones not; partition 1: its one call marked.
    expect(first.filter((s) => s.startsWith('p0-'))).toEqual(['p0-0:true', 'p0-1:true', 'p0-2:true', 'p0-3:false', 'p0-4:false', 'p0-5:false', 'p0-6:false']);
    expect(first.filter((s) => s.startsWith('p1-'))).toEqual(['p1-0:true', 'p1-1:true']);

    // A new member of the group (the next process after a crash or a deploy) marks its first call again.
    await k.h.produce(p0.slice(7).map((id) => ({ id, value: { id }, partition: 0 })));
    const second: string[] = [];
    await k.start(recording(second, batch), { batchSize: 3 });
    await waitFor('partition 0 committed to the end', async () => (await k.h.committed())[0] === 11);
    expect(second).toEqual(['p0-7:true', 'p0-8:true', 'p0-9:true', 'p0-10:false']);

    // Every record applied exactly once; the attempts counted ahead were all taken back.
    const effects = await effectsOf(k);
    expect(Object.keys(effects).sort()).toEqual([...p0, ...p1].sort());
    expect(Object.values(effects).every((n) => n === 1)).toBe(true);
    expect(await attemptsOf(k)).toEqual([]);
  });

  it('batch processor: a first chunk of suspects that takes longer than the session (they run one by one) keeps the member in the group', async () => {
    // 120 records a process died with (each has an attempts record), so core runs each alone; at
    // 30 ms each they take about 4 s, past the harness's 3 s session, within one processor call.
    const ids = Array.from({ length: 120 }, (_, i) => `slow-${i}`);
    await k.t.query(
      `insert into "${k.t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code)
       select 'billing', 'slow-' || g, 1, 'ATTEMPT_UNFINISHED' from generate_series(0, 119) as g`,
    );
    const calls: number[] = [];
    const batch = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        calls.push(messages.length);
        await new Promise((resolve) => setTimeout(resolve, 30 * messages.length));
        await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id })));
      },
      { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
    );
    await k.h.produce(ids.map((id) => ({ id, value: { id }, partition: 0 })));
    const consumer = await k.start(batch, { batchSize: 120 });
    const errors: string[] = [];
    consumer.on('error', (error) => void errors.push(String(error.code)));
    await waitFor('partition 0 committed to the end', async () => (await k.h.committed())[0] === 120, 30_000);
    await consumer.stop();
    // No refused commit (the member was never evicted), each record ran alone, and every one was applied once.
    expect(errors).toEqual([]);
    expect(calls).toEqual(ids.map(() => 1));
    const effects = await effectsOf(k);
    expect(Object.keys(effects).sort()).toEqual([...ids].sort());
    expect(Object.values(effects).every((n) => n === 1)).toBe(true);
    // Only the deaths before stay counted.
    expect(await k.t.query(`select count(*)::int as n from "${k.t.schema}".inbox_attempts where attempts = 1`)).toEqual([{ n: 120 }]);
  }, 60_000);

  it('batch processor: a first chunk of first-time redeliveries runs in one transaction', async () => {
    const calls: number[] = [];
    const batch = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        calls.push(messages.length);
        await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id })));
      },
      { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
    );
    const ids = Array.from({ length: 50 }, (_, i) => `fresh-${i}`);
    await k.h.produce(ids.map((id) => ({ id, value: { id }, partition: 0 })));
    const consumer = await k.start(batch, { batchSize: 50 });
    await waitFor('partition 0 committed to the end', async () => (await k.h.committed())[0] === 50, 30_000);
    await consumer.stop();
    // kafkajs may hand the first fetch over in pieces; each piece is one transaction, never one per record.
    expect(calls.reduce((a, b) => a + b, 0)).toBe(50);
    expect(calls.length).toBeLessThan(5);
    expect(Object.values(await effectsOf(k)).every((n) => n === 1)).toBe(true);
    expect(await k.t.query(`select * from "${k.t.schema}".inbox_attempts`)).toEqual([]);
  }, 60_000);

  it('per-message processor: the first record of each partition, and the replay of a hold of it; a failure stays counted once', async () => {
    const failed = new Set<string>();
    const single = withInbox(
      async (message: InboxMessage, tx: any) => {
        // a-0 (the first record, marked) and a-2 (not marked) each fail once: both are held and replayed.
        if ((message.id === 'a-0' || message.id === 'a-2') && !failed.has(message.id)) {
          failed.add(message.id);
          throw new Error('ledger unavailable');
        }
        await tx.insert(k.t.effects).values({ messageId: message.id });
      },
      { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema }, backoff: { baseDelayMs: 20, maxDelayMs: 100 } },
    );
    const ids = ['a-0', 'a-1', 'a-2', 'a-3'];
    await k.h.produce([
      ...ids.map((id) => ({ id, value: { id }, partition: 0 })),
      { id: 'b-0', value: {}, partition: 1 },
      { id: 'b-1', value: {}, partition: 1 },
    ]);
    const seen: string[] = [];
    const consumer = await k.start(recording(seen, single));
    const retries: string[] = [];
    consumer.on('retry', (outcome) => retries.push(outcome.messageId));
    await waitFor('both partitions committed to the end', async () => {
      const committed = await k.h.committed();
      return committed[0] === 4 && committed[1] === 2;
    });
    expect(retries).toEqual(['a-0', 'a-2']);
    // a-0's replay is still marked (a marked attempt that ended in a retry still owes a counted run); a-2's is not.
    expect(seen.filter((s) => s.startsWith('a-'))).toEqual(['a-0:true', 'a-0:true', 'a-1:false', 'a-2:false', 'a-2:false', 'a-3:false']);
    expect(seen.filter((s) => s.startsWith('b-'))).toEqual(['b-0:true', 'b-1:false']);
    expect(await k.applied()).toEqual(expect.arrayContaining([...ids, 'b-0', 'b-1']));
    expect(await k.applied()).toHaveLength(6);
    // Each failure stays counted once; a-0's replay, counted ahead, was taken back when it succeeded.
    expect((await attemptsOf(k)).map((row) => row.split(':').slice(0, 2).join(':'))).toEqual(['a-0:1', 'a-2:1']);
  });
});

/** A poison-worker process (test/fixtures/poison-worker.ts) with the harness's topic and group. */
function startPoisonWorker(env: Record<string, string>) {
  const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', workerScript], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = watchOutput(child, 'poison worker');
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  return { child, output, exited };
}

describe.each([
  { mode: 'per-message', batchSize: undefined },
  { mode: 'batch', batchSize: 3 },
])('a record that kills the process every time it runs ($mode processor)', ({ batchSize }) => {
  const k = useKafkaTestKit({ partitions: 1, label: 'kafka_poison' });
  const children: ReturnType<typeof startPoisonWorker>[] = [];
  afterEach(() => {
    for (const worker of children.splice(0)) worker.child.kill('SIGKILL');
  });
  const maxAttempts = 2;

  /** Runs a worker process until it meets the poison record, then SIGKILLs it there (its transaction open); returns what it printed. */
  const dieOnPoison = async () => {
    const worker = startPoisonWorker({
      ...k.h.workerEnv(),
      DATABASE_URL: databaseUrl(),
      SCHEMA: k.t.schema,
      POISON: 'poison',
      MAX_ATTEMPTS: String(maxAttempts),
      ...(batchSize === undefined ? {} : { BATCH_SIZE: String(batchSize) }),
    });
    children.push(worker);
    await worker.output.waitFor('dying poison', 45_000);
    worker.child.kill('SIGKILL');
    expect(await worker.exited).toBe('SIGKILL');
    return worker.output.output();
  };
  const handled = (output: string) => [...output.matchAll(/^handling (\S+) redelivered=(\w+)$/gm)].map((m) => `${m[1]}:${m[2]}`);

  it('is counted on every redelivery, dead-lettered after maxAttempts deaths without running again; the records around it apply once and the offset moves past it', async () => {
    // Per-message: the poison is the third record, so the first process reaches it unmarked.
    // Batch (3 per call): it is in the second call, which the first process runs unmarked too.
    const ids = batchSize === undefined ? ['m-0', 'm-1', 'poison', 'm-3'] : ['m-0', 'm-1', 'm-2', 'm-3', 'poison', 'm-5', 'm-6'];
    await k.h.produce(ids.map((id) => ({ id, value: { id } })));
    const before = ids.slice(0, ids.indexOf('poison'));
    const head = batchSize === undefined ? ids.slice(0, 2) : ids.slice(0, 3); // committed by the first process

    // 1. The first process dies at the poison. Nothing marked it: the death is not counted (no broker would know either).
    let out = await dieOnPoison();
    expect(handled(out)).toEqual(
      batchSize === undefined ? ['m-0:true', 'm-1:false', 'poison:false'] : ['m-0:true', 'm-1:true', 'm-2:true', 'm-3:false', 'poison:false', 'm-5:false'],
    );
    expect(await attemptsOf(k)).toEqual([]);
    expect((await k.h.committed())[0]).toBe(head.length);
    expect(Object.keys(await effectsOf(k)).sort()).toEqual(head);

    // 2. and 3. Every next process starts at the committed offset with its first call marked: the
    // poison's attempt is counted before it runs, and stays counted when the process dies in it.
    // Batch: the first call's records have no attempts record yet, so they run together, and the
    // death charges each of them once. From then on they are suspects, run one at a time: m-3
    // commits alone before the poison (taking back its count), and the next death is the poison's
    // only; m-5 never gets its turn.
    const expected = [
      ['m-3:1', 'm-5:1', 'poison:1'],
      ['m-3:1', 'm-5:1', 'poison:2'],
    ];
    for (let death = 1; death <= maxAttempts; death++) {
      out = await dieOnPoison();
      // What the first call was handed, marked.
      expect(handled(out)).toEqual(batchSize === undefined ? ['poison:true'] : ['m-3:true', 'poison:true', 'm-5:true']);
      expect(await attemptsOf(k)).toEqual(
        (batchSize === undefined ? [`poison:${death}`] : expected[death - 1]!).map((attempts) => `${attempts}:ATTEMPT_UNFINISHED`),
      );
      expect((await k.h.committed())[0]).toBe(head.length);
    }
    if (batchSize !== undefined) expect(Object.keys(await effectsOf(k)).sort()).toEqual([...head, 'm-3']);

    // 4. The next member does not run it again: it is dead-lettered, the rest is processed and committed.
    const ran: string[] = [];
    const options = { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema }, maxAttempts };
    const apply = async (messages: readonly InboxMessage[], tx: any) => {
      ran.push(...messages.map((m) => m.id));
      if (messages.some((m) => m.id === 'poison')) throw new Error('the poison ran again');
      await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id })));
    };
    const processor =
      batchSize === undefined
        ? withInbox((message: InboxMessage, tx: any) => apply([message], tx), options)
        : withInboxBatch((messages: InboxMessage[], tx: any) => apply(messages, tx), options);
    const consumer = await k.start(processor, batchSize === undefined ? {} : { batchSize });
    const deadLettered: string[] = [];
    consumer.on('dead_letter', (outcome) => deadLettered.push(`${outcome.messageId}:${outcome.reason}`));
    await waitFor('the partition committed to the end', async () => (await k.h.committed())[0] === ids.length, 30_000);
    expect(ran).not.toContain('poison');
    expect(deadLettered).toEqual(['poison:max-attempts-exceeded']);
    const dead = await k.h.deadLetterRecords();
    expect(dead.map((r) => `${r.headerText['x-inboxed-message-id']}:${r.headerText['x-inboxed-reason']}:${r.headerText['x-inboxed-original-offset']}`)).toEqual(
      [`poison:max-attempts-exceeded:${ids.indexOf('poison')}`],
    );
    const recorded = await k.t.query<{ message_id: string; reason: string; error_code: string; attempts: number }>(
      `select message_id, reason, error_code, attempts from "${k.t.schema}".inbox_dead_letters`,
    );
    expect(recorded).toEqual([{ message_id: 'poison', reason: 'max-attempts-exceeded', error_code: 'MAX_ATTEMPTS_EXCEEDED', attempts: maxAttempts }]);
    // Every other record applied exactly once, whichever process got to it.
    const effects = await effectsOf(k);
    expect(Object.keys(effects).sort()).toEqual(ids.filter((id) => id !== 'poison').sort());
    expect(Object.values(effects).every((n) => n === 1)).toBe(true);
    expect(before.every((id) => effects[id] === 1)).toBe(true);
  }, 180_000);
});
