import { migrate } from '@inboxed/core';
import { createTestDatabase, databaseUrl, type TestDatabase, waitFor } from '@inboxed/test-support';
import { expect } from 'vitest';
import type { BrokerHarness, PublishedMessage } from '../conformance/harness.js';
import { startWorker, type Worker } from '../conformance/workers.js';

/** How big a soak is: `SOAK_MESSAGES` deliveries (default 3,000, the CI size; `pnpm test:soak` runs 20,000). */
export const SOAK_MESSAGES = Number(process.env.SOAK_MESSAGES ?? 3_000);
const WORKERS = 3;
/** Share of deliveries that are copies of another (same id, same payload). */
const DUPLICATE_SHARE = 0.25;
/** Ids published twice with different payloads: the second copy to arrive is a conflict. */
const CONFLICTS = 12;
/** Kills stop after this long even if the work is not done yet, so a slow broker still converges. */
const KILL_PHASE_MS = Number(process.env.SOAK_KILL_PHASE_MS ?? 45_000);
const SETTLE_TIMEOUT_MS = 300_000;
/** The stream is published over this long (at least 12 s, 1 s per 1,000 deliveries), a part every PUBLISH_INTERVAL_MS. */
const PUBLISH_MS = Math.max(12_000, SOAK_MESSAGES);
const PUBLISH_INTERVAL_MS = 200;
/** What each handler does besides its insert (ms), so deliveries are in flight when a kill lands. */
const WORK_MS = '5';
/** A soak that killed fewer workers than this proved nothing about kills. */
const MIN_KILLS = 3;

/** The deliveries of one soak: unique ids, copies of them spread through the stream, a few conflicts. */
export function soakPlan(total: number, random: () => number = Math.random, conflicts: number = CONFLICTS) {
  const uniqueCount = Math.round(total * (1 - DUPLICATE_SHARE)) - conflicts;
  const ids = Array.from({ length: uniqueCount }, (_, i) => `soak-${i}`);
  const conflictIds = ids.slice(0, conflicts);
  const messages: PublishedMessage[] = ids.map((id, i) => ({ id, payload: { n: i } }));
  // Copies land anywhere after their original: some right behind it (same fetch or batch), some far away.
  for (let copy = 0; messages.length < total - conflicts; copy++) {
    const i = conflicts + Math.floor(random() * (uniqueCount - conflicts));
    const at = Math.min(messages.length, i + 1 + Math.floor(random() * (copy % 2 === 0 ? 3 : messages.length)));
    messages.splice(at, 0, { id: ids[i]!, payload: { n: i } });
  }
  for (const [k, id] of conflictIds.entries()) {
    messages.splice(Math.floor(random() * messages.length), 0, { id, payload: { n: k, conflicting: true } });
  }
  return { messages, ids, conflictIds, duplicates: total - uniqueCount - conflicts };
}

export type SoakPlan = ReturnType<typeof soakPlan>;

/** What a soak may change; the defaults are the broker soaks'. */
export interface SoakOptions {
  /**
   * `transactional` (default): one worker in batch mode, the others single. `leased`: every worker runs
   * leased mode (there is no leased batch mode); give it PROVIDER_URL and LEASE_MS in `env`.
   */
  mode?: 'transactional' | 'leased';
  /** More environment for every worker (overrides the soak's own, e.g. WORK_MS). */
  env?: Record<string, string>;
  /** Ids published a second time with another payload (default 12); their dead-letters are checked. */
  conflicts?: number;
  /** Deliveries (default {@link SOAK_MESSAGES}). */
  messages?: number;
  /** The consumer name (default `<broker>.soak`). */
  consumer?: string;
  /**
   * The caller's own checks, after the soak's and before the schema is dropped: on the database, on
   * what every worker printed (killed ones included), on outside systems.
   */
  verify?: (soaked: { t: TestDatabase; plan: SoakPlan; workers: readonly Worker[] }) => Promise<void>;
}

function countBy(values: string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const value of values.sort()) counts[value] = (counts[value] ?? 0) + 1;
  return counts;
}

/** What a soak ended with, printed as its summary line. */
export interface SoakSummary {
  broker: string;
  published: number;
  unique: number;
  duplicates: number;
  conflicts: number;
  kills: number;
  effects: number;
  deadLetters: number;
  /** What the workers settled, by status (`settling` lines of every worker, killed ones included). */
  settled: Record<string, number>;
  seconds: number;
}

export function summaryLine(s: SoakSummary): string {
  return (
    `soak ${s.broker}: N=${s.published} (${s.unique} unique ids, ${s.duplicates} duplicate deliveries = ${Math.round((100 * s.duplicates) / s.published)}%, ` +
    `${s.conflicts} conflicts), ${WORKERS} workers, ${s.kills} SIGKILLs, effects=${s.effects} (one per unique id, none twice), ` +
    `dead letters=${s.deadLetters}, pending=0; settled ${Object.entries(s.settled)
      .map(([status, n]) => `${status} ${n}`)
      .join(
        ', ',
      )} (${Object.values(s.settled).reduce((a, b) => a + b, 0) - s.published} beyond one per delivery: kills after a commit, retries); ${s.seconds.toFixed(0)} s`
  );
}

/**
 * The soak every broker runs: three worker processes (one of them in batch mode) consume one
 * destination under one consumer name while SIGKILL takes down a random one every 1-3 s and a new one
 * replaces it. The database and the broker are asked at the end, not the workers: every unique id has
 * exactly one effect, every conflict reached the dead-letter target, and nothing is left unsettled.
 * `options` runs it in leased mode (test/soak/leased-soak.test.ts) and adds the caller's checks.
 */
export async function soak(createHarness: () => BrokerHarness, options: SoakOptions = {}): Promise<SoakSummary> {
  const began = Date.now();
  const t: TestDatabase = await createTestDatabase('node-postgres', { label: 'soak' });
  await migrate(t.db, { schema: t.schema });
  const h = createHarness();
  await h.setup();
  const workers: Worker[] = [];
  const everyWorker: Worker[] = [];
  const crashed: string[] = [];
  try {
    const plan = soakPlan(options.messages ?? SOAK_MESSAGES, Math.random, options.conflicts ?? CONFLICTS);
    const env = {
      ...h.workerEnv(),
      BROKER: h.broker,
      DATABASE_URL: databaseUrl(),
      SCHEMA: t.schema,
      CONSUMER_NAME: options.consumer ?? `${h.broker}.soak`,
      WORK_MS,
      ...options.env,
    };
    const modeOf = (slot: number) => (options.mode === 'leased' ? 'leased' : slot === 0 ? 'batch' : 'single');
    const spawn = (slot: number) => {
      const worker = startWorker({ ...env, MODE: modeOf(slot) });
      void worker.exited.then(({ signal }) => {
        if (signal !== 'SIGKILL' && signal !== 'SIGTERM') crashed.push(worker.output());
      });
      workers[slot] = worker;
      everyWorker.push(worker);
    };
    for (let slot = 0; slot < WORKERS; slot++) spawn(slot);

    const countEffects = async () => Number((await t.query<{ n: number }>(`select count(*)::int as n from "${t.schema}".effects`))[0]!.n);
    // The stream arrives steadily over PUBLISH_MS, as in production, so every kill lands on work in
    // flight: deliveries received, in a transaction, committed and not yet settled.
    let published = false;
    const parts = Math.ceil(PUBLISH_MS / PUBLISH_INTERVAL_MS);
    const chunk = Math.ceil(plan.messages.length / parts);
    const publishing = (async () => {
      for (let i = 0; i < plan.messages.length; i += chunk) {
        const next = Date.now() + PUBLISH_INTERVAL_MS;
        await h.publish(plan.messages.slice(i, i + chunk));
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - Date.now())));
      }
      published = true;
    })();

    // Kill a random worker every 1-3 s and start a new one in its place, until the work is done
    // (or the kill phase is over: a broker that redelivers slowly after a kill must still finish).
    let kills = 0;
    const killsUntil = Date.now() + KILL_PHASE_MS;
    while (Date.now() < killsUntil && (kills < MIN_KILLS || !(published && (await countEffects()) >= plan.ids.length))) {
      await new Promise((resolve) => setTimeout(resolve, 1_000 + Math.random() * 2_000));
      if (crashed.length > 0) break;
      const slot = Math.floor(Math.random() * WORKERS);
      workers[slot]!.kill('SIGKILL');
      await workers[slot]!.exited;
      kills++;
      spawn(slot);
    }
    await publishing;
    expect(crashed, 'a worker exited on its own').toEqual([]);

    await waitFor(
      'every unique id applied and nothing left unsettled',
      async () => (await countEffects()) >= plan.ids.length && (await h.pending()) === 0,
      SETTLE_TIMEOUT_MS,
    );
    const rows = await t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${t.schema}".effects group by 1`);
    const appliedTwice = rows.filter((r) => Number(r.n) !== 1).map((r) => r.message_id);
    expect(appliedTwice, 'ids applied more than once').toEqual([]);
    expect(rows.map((r) => r.message_id).sort()).toEqual([...plan.ids].sort());
    const deadLetters = await h.deadLetters();
    for (const id of plan.conflictIds)
      expect(
        deadLetters.find((d) => d.id === id && d.reason === 'payload-mismatch'),
        `conflict ${id} dead-lettered`,
      ).toBeDefined();
    expect(deadLetters.filter((d) => d.reason !== 'payload-mismatch')).toEqual([]);
    expect(kills).toBeGreaterThanOrEqual(MIN_KILLS);
    expect(await h.pending()).toBe(0);
    await options.verify?.({ t, plan, workers: everyWorker });
    return {
      broker: h.broker,
      published: plan.messages.length,
      unique: plan.ids.length,
      duplicates: plan.duplicates,
      conflicts: plan.conflictIds.length,
      kills,
      effects: rows.length,
      deadLetters: deadLetters.length,
      settled: countBy(everyWorker.flatMap((w) => w.settling.map(([status]) => status))),
      seconds: (Date.now() - began) / 1_000,
    };
  } finally {
    for (const worker of workers) worker.kill('SIGKILL');
    await Promise.all(workers.map((w) => w.exited));
    await h.teardown();
    await t.close();
  }
}
