import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { migrate } from '@inboxed/core';
import { watchOutput } from '@inboxed/test-support/child-output';
import { createTestDatabase, databaseUrl, type TestDatabase } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpHarness, createHarness } from '../../packages/amqp/test/harness.js';

const workerScript = fileURLToPath(new URL('./fixtures/amqp-poison-worker.ts', import.meta.url));
const CONSUMER = 'amqp.poison-kill';
const MAX_ATTEMPTS = 3;
/** Longest a single worker run may take to die or drain the queue. */
const RUN_TIMEOUT_MS = 15_000;

interface Running {
  child: ChildProcess;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function startWorker(env: Record<string, string>): Running {
  const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', workerScript], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const watched = watchOutput(child, 'amqp-poison-worker');
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, output: watched.output, exited };
}

/**
 * A message whose processing kills the consumer process every time (OOM, a native crash): RabbitMQ
 * hands it back with `redelivered` set after each death, core counts that attempt before the handler
 * runs, and once the deaths exceed maxAttempts it is dead-lettered without running again. Workers
 * are real processes on the AMQP adapter, killed by the poison itself; everything is asked of the
 * database and the broker.
 */
describe('a message that SIGKILLs the RabbitMQ consumer process every time it runs', () => {
  let t: TestDatabase;
  let h: AmqpHarness;
  const workers: Running[] = [];

  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: 'poison_kill' });
    await migrate(t.db, { schema: t.schema });
    h = createHarness();
    await h.setup();
  });
  afterEach(async () => {
    for (const worker of workers.splice(0)) {
      worker.child.kill('SIGKILL');
      await worker.exited;
    }
    await h.teardown();
    await t.close();
  });

  /**
   * Resolves 'drained' once every published id is settled in the database (an inbox row or a
   * dead-letter record) and RabbitMQ holds nothing ready or unacked on the work and retry queues;
   * stops polling when `stop` fires. Cheap reads (SQL, checkQueue) first: the broker-side count of
   * unacked deliveries (rabbitmqctl, ~1 s) only once they say done.
   */
  async function drained(ids: string[], stop: AbortSignal): Promise<'drained' | 'stopped'> {
    const list = ids.map((id) => `'${id}'`).join(',');
    while (!stop.aborted) {
      const [row] = await t.query<{ open: number }>(
        `select count(*)::int as open from unnest(array[${list}]) as published(mid)
         where not exists (select 1 from "${t.schema}".inbox i where i.message_id = published.mid)
           and not exists (select 1 from "${t.schema}".inbox_dead_letters d where d.message_id = published.mid)`,
      );
      if (row!.open === 0 && (await h.depth()) === 0 && (await h.pending()) === 0) return 'drained';
      await sleep(200);
    }
    return 'stopped';
  }

  /** One line per run: how it ended, what its handler started, how it died, what it settled other than processed. */
  function summary(run: number, ended: string, ms: number, output: string): string {
    const lines = output.split('\n');
    const handled = lines.filter((line) => line.startsWith('handling ')).map((line) => line.split(' ')[1]);
    const notable = lines.filter((line) => /^(DYING|settling (?!processed|duplicate)|error)/.test(line));
    return [`run ${run}: ${ended} after ${ms} ms; handler started ${handled.join(',') || 'nothing'}`, ...notable.map((line) => `  ${line}`)].join('\n');
  }

  /**
   * Publishes `ids`, then runs worker after worker: each until it dies or the queue is drained (then
   * SIGTERM), at most maxAttempts + 3 runs. Returns how many died, what they printed and a summary.
   */
  async function runUntilDrained(ids: string[], env: Record<string, string>) {
    await h.publish(ids.map((id, n) => ({ id, payload: { n } })));
    const fullEnv = { ...h.workerEnv(), DATABASE_URL: databaseUrl(), SCHEMA: t.schema, CONSUMER_NAME: CONSUMER, MAX_ATTEMPTS: String(MAX_ATTEMPTS), ...env };
    let deaths = 0;
    let drainedAtLast = false;
    const outputs: string[] = [];
    const story: string[] = [];
    for (let run = 1; run <= MAX_ATTEMPTS + 3 && !drainedAtLast; run++) {
      const startedAt = Date.now();
      const worker = startWorker(fullEnv);
      workers.push(worker);
      const stop = new AbortController();
      const ended = await Promise.race([worker.exited, drained(ids, stop.signal), sleep(RUN_TIMEOUT_MS).then(() => 'timeout' as const)]).finally(() =>
        stop.abort(),
      );
      if (typeof ended === 'string') {
        worker.child.kill('SIGTERM');
        const exit = await worker.exited;
        outputs.push(worker.output());
        story.push(summary(run, ended, Date.now() - startedAt, worker.output()));
        if (ended === 'timeout') throw new Error(`run ${run}: the worker neither died nor drained the queue in ${RUN_TIMEOUT_MS} ms:\n${worker.output()}`);
        expect(exit, `run ${run} stopped on SIGTERM:\n${worker.output()}`).toEqual({ code: 0, signal: null });
        drainedAtLast = true;
      } else {
        outputs.push(worker.output());
        story.push(summary(run, `died (${ended.signal ?? ended.code})`, Date.now() - startedAt, worker.output()));
        expect(ended.signal, `run ${run} ended on its own:\n${worker.output()}`).toBe('SIGKILL');
        expect(worker.output()).toMatch(/^DYING poison-1 /m);
        deaths++;
      }
    }
    const attempts = await t.query<{ message_id: string; attempts: number }>(`select message_id, attempts from "${t.schema}".inbox_attempts order by 1`);
    story.push(`inbox_attempts: ${JSON.stringify(attempts.map((row) => `${row.message_id}=${row.attempts}`))}`);
    const told = story.join('\n');
    if (!drainedAtLast) throw new Error(`the poison kept killing the worker: ${deaths} deaths in ${MAX_ATTEMPTS + 3} runs, the queue never drained\n${told}`);
    return { deaths, output: outputs.join('\n'), story: told };
  }

  const deadLetterRecords = () =>
    t.query<{ message_id: string; reason: string; error_code: string }>(
      `select message_id, reason, error_code from "${t.schema}".inbox_dead_letters order by dead_lettered_at`,
    );

  /** The final state, read from PostgreSQL and RabbitMQ once every worker is gone. */
  async function expectPoisonDeadLetteredAndGoodProcessedOnce(good: string[], { deaths, output, story }: { deaths: number; output: string; story: string }) {
    const effects = new Map(
      (await t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${t.schema}".effects group by 1`)).map((row) => [
        row.message_id,
        row.n,
      ]),
    );
    for (const id of good) expect(effects.get(id), `effect rows of ${id}; dead-letter records ${JSON.stringify(await deadLetterRecords())}\n${story}`).toBe(1);
    expect(effects.get('poison-1'), 'the poison never committed its effect').toBeUndefined();
    expect(effects.size).toBe(good.length);

    // The work queue is empty: nothing ready and, with no consumer left, nothing unacked; nor are the retry queues.
    const work = await h.channel.checkQueue(h.queue);
    expect({ ready: work.messageCount, consumers: work.consumerCount }).toEqual({ ready: 0, consumers: 0 });
    expect(await h.pending()).toBe(0);

    // Dead-lettered once: one copy in the dead-letter queue, one record, both saying max-attempts-exceeded.
    const copies = await h.deadLetters();
    expect(copies.map(({ id, reason }) => ({ id, reason }))).toEqual([{ id: 'poison-1', reason: 'max-attempts-exceeded' }]);
    expect(await deadLetterRecords(), story).toEqual([{ message_id: 'poison-1', reason: 'max-attempts-exceeded', error_code: 'MAX_ATTEMPTS_EXCEEDED' }]);

    // The first delivery is not marked redelivered, so its death is not counted: maxAttempts + 1 deaths at most,
    // and the poison's handler ran exactly once per death (the dead-letter did not run it again).
    expect(deaths).toBeGreaterThanOrEqual(1);
    expect(deaths).toBeLessThanOrEqual(MAX_ATTEMPTS + 1);
    expect(output.match(/^handling poison-1 /gm)?.length).toBe(deaths);
    expect(output.match(/^settling dead-letter poison-1 max-attempts-exceeded /gm)?.length).toBe(1);
  }

  it('per-message processor (withInbox): dead-lettered after maxAttempts counted deaths; its neighbours are processed once', async () => {
    const good = Array.from({ length: 8 }, (_, i) => `good-${i}`);
    const result = await runUntilDrained([...good.slice(0, 4), 'poison-1', ...good.slice(4)], { MODE: 'single' });
    console.log(`withInbox: ${result.deaths} worker deaths\n${result.story}`);
    await expectPoisonDeadLetteredAndGoodProcessedOnce(good, result);
  });

  it('batch processor (withInboxBatch, batchSize 10): the poison among 15 good messages is dead-lettered; every good one is processed once', async () => {
    const good = Array.from({ length: 15 }, (_, i) => `good-${String(i).padStart(2, '0')}`);
    const result = await runUntilDrained([...good.slice(0, 6), 'poison-1', ...good.slice(6)], { MODE: 'batch', BATCH_SIZE: '10' });
    console.log(`withInboxBatch: ${result.deaths} worker deaths\n${result.story}`);
    await expectPoisonDeadLetteredAndGoodProcessedOnce(good, result);
  });
});
