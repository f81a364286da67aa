/**
 * Core benchmark on real PostgreSQL: the same handler (one domain insert) as a bare transaction
 * and under withInbox, at concurrency 1 and 8; then the same set-based insert
 * (`insert ... select from unnest(...)`, 100 messages per transaction) bare, with a hand-written
 * minimal inbox (the database floor of any inbox: one more row per message under a unique key),
 * and under withInboxBatch.
 *
 * Method: every measured run starts from the same
 * state. The effects table and the inbox are truncated before each run, then the machine settles
 * (a CHECKPOINT and a wait for quiet, see `settle`; unless BENCH_CORE_CHECKPOINT=0), so no run pays
 * for the rows, index pages or WAL of the runs before it, and no checkpoint's full-page writes land
 * inside one run but not its pair. Bare and
 * inboxed runs alternate in paired rounds (bare first, then inbox first, ...); the table shows
 * medians and the range of the per-round ratios.
 *
 * Env: BENCH_SCALE (message counts), BENCH_ROUNDS (default 7 per-message, 9 batch),
 * BENCH_CORE_BATCH_WORKERS (default 2), BENCH_CORE_CHECKPOINT (default 1).
 */
import { migrate, withInbox, withInboxBatch, type InboxMessage } from '@inboxed/core';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigserial, jsonb, pgSchema, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import {
  benchMaxRounds,
  benchPool,
  benchRounds,
  cpuSince,
  measure,
  medianRun,
  pairedRounds,
  ratioKnown,
  report,
  reportedLines,
  reportSection,
  scaled,
  stats,
  type RunStats,
} from '../bench-kit.js';
import { runLines, type Sample, settle } from '../broker-harness.js';
import { InMemoryPool } from '../in-memory-pool.js';
// Internal pieces of core, timed in isolation for the Node CPU split (not public API): typed from
// the source, loaded from the build that `pnpm bench` makes first, as the lines above run it.
type FingerprintModule = typeof import('../../packages/core/src/fingerprint.js');
type StoreModule = typeof import('../../packages/core/src/inbox-store.js');
type SchemaModule = typeof import('../../packages/core/src/schema.js');
const built = <T>(file: string): Promise<T> => import(new URL(`../../packages/core/dist/${file}`, import.meta.url).href) as Promise<T>;

const SCHEMA = `bench_core_${process.pid}`;
const effects = pgSchema(SCHEMA).table('effects', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  messageId: text('message_id').notNull(),
  payload: jsonb('payload'),
});

const ROUNDS = benchRounds(7);
const BATCH_ROUNDS = benchRounds(9);
/** Rounds of 3-6 s: at 1,500 / 4,000 messages they lasted 1-2 s and moved by up to 45% between rounds. */
const PER_ROUND = { 1: scaled(4_000, 50), 8: scaled(12_000, 100) } as const;
const BATCH_SIZE = 100;
/** At 60,000 the bare batch's rounds lasted about half a second; 150,000 makes them 1.5 s (withInboxBatch's 4-5 s). */
const BATCH_MESSAGES = scaled(150_000, 10 * BATCH_SIZE);
const BATCH_WORKERS = Number(process.env.BENCH_CORE_BATCH_WORKERS ?? 2);
const CHECKPOINT = process.env.BENCH_CORE_CHECKPOINT !== '0';

type Payload = { amount: number; currency: string };

export default async function run(): Promise<void> {
  const pool = benchPool(10);
  const db = drizzle(pool);
  await pool.query(`create schema "${SCHEMA}"`);
  await pool.query(`create table "${SCHEMA}".effects (id bigserial primary key, message_id text not null, payload jsonb)`);
  await pool.query(`create table "${SCHEMA}".minimal_inbox (consumer text not null, message_id text not null, primary key (consumer, message_id))`);
  await migrate(db, { schema: SCHEMA });

  let seq = 0;
  const message = (): InboxMessage<Payload> => ({ id: `m-${++seq}`, payload: { amount: seq, currency: 'EUR' } });

  /** Empties the tables every run writes to, so each run starts from the same state. */
  const fresh = async () => {
    await pool.query(`truncate "${SCHEMA}".effects, "${SCHEMA}".inbox, "${SCHEMA}".minimal_inbox`);
    await pool.query(`analyze "${SCHEMA}".effects, "${SCHEMA}".inbox, "${SCHEMA}".minimal_inbox`);
    if (CHECKPOINT) await settle(pool);
  };

  const bare = (m: InboxMessage<Payload>) =>
    db.transaction(async (tx) => {
      await tx.insert(effects).values({ messageId: m.id, payload: m.payload });
    });
  const inbox = withInbox<typeof db, Payload>(
    async (m, tx) => {
      await tx.insert(effects).values({ messageId: m.id, payload: m.payload });
    },
    { db, consumer: 'bench', tables: { schema: SCHEMA } },
  );

  // Set-based: one INSERT ... SELECT FROM unnest(arrays) for the whole batch, bare and inboxed.
  const insertBatch = (messages: InboxMessage<Payload>[]) =>
    sql`insert into ${effects} (message_id, payload)
      select * from unnest(${sql.param(messages.map((m) => m.id))}::text[], ${sql.param(messages.map((m) => JSON.stringify(m.payload)))}::jsonb[])`;
  const bareBatch = (messages: InboxMessage<Payload>[]) =>
    db.transaction(async (tx) => {
      await tx.execute(insertBatch(messages));
    });
  const inboxBatch = withInboxBatch<typeof db, Payload>(
    async (messages, tx) => {
      await tx.execute(insertBatch(messages));
    },
    { db, consumer: 'bench-batch', tables: { schema: SCHEMA } },
  );

  // The least a database-decided inbox can do: the same insert plus one row per message under a
  // unique (consumer, message_id), in the same transaction. A lower bound for inboxed, not a product.
  const minimalInboxBatch = (messages: InboxMessage<Payload>[]) =>
    db.transaction(async (tx) => {
      const claimed = await tx.execute<{ message_id: string }>(
        sql`insert into ${sql.raw(`"${SCHEMA}".minimal_inbox`)} (consumer, message_id)
          select 'bench', id from unnest(${sql.param(messages.map((m) => m.id))}::text[]) as m(id)
          on conflict do nothing returning message_id`,
      );
      if (claimed.rows.length !== messages.length) throw new Error('minimal inbox: unexpected duplicate');
      await tx.execute(insertBatch(messages));
    });

  try {
    // Warm-up: connections, prepared plans, caches, JIT of both code paths.
    await measure(scaled(500, 50), 8, () => bare(message()));
    await measure(scaled(500, 50), 8, async () => void (await inbox(message())));
    await measure(scaled(30, 5), BATCH_WORKERS, () => bareBatch(Array.from({ length: BATCH_SIZE }, message)));
    await measure(scaled(30, 5), BATCH_WORKERS, async () => void (await inboxBatch(Array.from({ length: BATCH_SIZE }, message))));
    await measure(scaled(30, 5), BATCH_WORKERS, () => minimalInboxBatch(Array.from({ length: BATCH_SIZE }, message)));

    for (const concurrency of [1, 8] as const) {
      const runBare = async () => {
        await fresh();
        return measure(PER_ROUND[concurrency], concurrency, () => bare(message()));
      };
      const runInbox = async () => {
        await fresh();
        return measure(PER_ROUND[concurrency], concurrency, async () => {
          const outcome = await inbox(message());
          if (outcome.status !== 'processed') throw new Error(`unexpected ${outcome.status}`, { cause: outcome.error });
        });
      };
      // c8 has a target: rounds are added until its ratio is known to BENCH_PRECISION (see runLines).
      const rates = (runs: RunStats[]) => runs.map((r) => r.perSecond);
      const untilKnown = {
        until: (bareRuns: RunStats[], inboxRuns: RunStats[]) => ratioKnown(rates(inboxRuns), rates(bareRuns)),
        maxRounds: benchMaxRounds(ROUNDS),
      };
      const { a: bares, b: inboxes } = await pairedRounds(ROUNDS, runBare, runInbox, concurrency === 8 ? untilKnown : undefined);
      const bareMode = `bare transaction c${concurrency}`;
      line(bareMode, PER_ROUND[concurrency], bares);
      line(`withInbox c${concurrency}`, PER_ROUND[concurrency], inboxes, {
        baseline: bareMode,
        ...(concurrency === 8 ? { target: { ratio: 0.85, text: '>= 0.85 of bare' } } : {}),
      });
    }

    await reportPerMessageSplit();

    const batches = BATCH_MESSAGES / BATCH_SIZE;
    const batchRun = (work: () => Promise<void>) => async (): Promise<Sample> => {
      await fresh();
      const run = await measure(batches, BATCH_WORKERS, work);
      // Latency stays per batch; throughput counts messages.
      return { ...run, perSecond: run.perSecond * BATCH_SIZE, settled: BATCH_MESSAGES, cpuUs: run.cpuUs / BATCH_SIZE };
    };
    const bareBatchMode = 'bare batch (same set-based insert, no inbox)';
    const batchNote = `${BATCH_SIZE} messages per transaction, ${BATCH_WORKERS} workers; p50/p99 per batch`;
    await runLines(
      'core',
      BATCH_ROUNDS,
      [
        { mode: bareBatchMode, messages: BATCH_MESSAGES, note: batchNote, run: batchRun(() => bareBatch(Array.from({ length: BATCH_SIZE }, message))) },
        {
          mode: 'hand-written minimal inbox (same insert + unique (consumer, message_id) insert, the database floor)',
          messages: BATCH_MESSAGES,
          baseline: bareBatchMode,
          note: `${batchNote}; what any database-decided inbox costs at least: no fingerprint, no completion check, no retention index`,
          run: batchRun(() => minimalInboxBatch(Array.from({ length: BATCH_SIZE }, message))),
        },
        {
          mode: 'withInboxBatch',
          messages: BATCH_MESSAGES,
          baseline: bareBatchMode,
          note: batchNote,
          target: { ratio: 0.8, perSecond: 30_000, text: '>= 0.80 of bare batch and >= 30,000 msg/s' },
          run: batchRun(async () => {
            const outcomes = await inboxBatch(Array.from({ length: BATCH_SIZE }, message));
            if (outcomes.some((o) => o.status !== 'processed')) throw new Error('unexpected batch outcome');
          }),
        },
      ],
      report,
    );
    await reportNodeSplit(message);
  } finally {
    await pool.query(`drop schema "${SCHEMA}" cascade`);
    await pool.end();
  }
}

/** Reports one per-message core line from its runs. */
function line(
  mode: string,
  messages: number,
  runs: RunStats[],
  options: { baseline?: string; target?: { ratio?: number; perSecond?: number; text: string }; note?: string } = {},
): void {
  const median = medianRun(runs);
  report({
    suite: 'core',
    mode,
    messages,
    rounds: runs.map((r) => r.perSecond),
    p50Ms: median.p50Ms,
    p99Ms: median.p99Ms,
    cpuUsPerMessage: stats(runs.map((r) => r.cpuUs)).median,
    ...(options.baseline !== undefined ? { baseline: options.baseline } : {}),
    ...(options.target !== undefined ? { target: options.target } : {}),
    ...(options.note !== undefined ? { note: options.note } : {}),
  });
}

/**
 * Where inboxed's Node CPU per message goes in per-message mode (withInbox c8). The same handler
 * runs bare and under withInbox on an in-memory stand-in for the pool (see in-memory-pool.ts): the
 * difference there is the JavaScript inboxed adds (validation, fingerprint, SQL text, the
 * transaction's bookkeeping), with nothing else in it; withInbox with `fingerprint: false` on it
 * gives the fingerprint's share. Set against the real lines' difference, the rest is not JavaScript:
 * the driver and the kernel, and, where PostgreSQL shares the machine's cores, the Node CPU that its
 * extra work per message costs Node (measured on a 2-core VM: a hand-written transaction that only
 * added PostgreSQL work, `count(*)` over 3,000 generated rows, raised Node's CPU per message by about
 * 60 µs with no more JavaScript).
 */
async function reportPerMessageSplit(): Promise<void> {
  const db = drizzle(new InMemoryPool(SCHEMA) as unknown as pg.Pool);
  let seq = 0;
  const message = (): InboxMessage<Payload> => ({ id: `m-${++seq}`, payload: { amount: seq, currency: 'EUR' } });
  const handler = async (m: InboxMessage<Payload>, tx: Parameters<Parameters<typeof db.transaction>[0]>[0]) => {
    await tx.insert(effects).values({ messageId: m.id, payload: m.payload });
  };
  const inboxOf = (extra: { fingerprint?: false }) => {
    const process = withInbox<typeof db, Payload>(handler, { db, consumer: 'bench', tables: { schema: SCHEMA }, ...extra });
    return async () => {
      const outcome = await process(message());
      if (outcome.status !== 'processed') throw new Error(`in-memory withInbox: unexpected ${outcome.status}`, { cause: outcome.error });
    };
  };
  const lines = {
    bare: () => db.transaction((tx) => handler(message(), tx)),
    inbox: inboxOf({}),
    unfingerprinted: inboxOf({ fingerprint: false }),
  };
  const perRound = scaled(20_000, 500);
  const cpuPerMessage = async (work: () => Promise<unknown>, total: number) => {
    const cpu = process.cpuUsage();
    await measure(total, 8, async () => void (await work()));
    return cpuSince(cpu) / total;
  };
  for (const work of Object.values(lines)) await cpuPerMessage(work, perRound / 4); // warm-up: JIT
  const times: Record<keyof typeof lines, number[]> = { bare: [], inbox: [], unfingerprinted: [] };
  for (let round = 0; round < 5; round++) {
    for (const name of Object.keys(lines) as (keyof typeof lines)[]) times[name].push(await cpuPerMessage(lines[name], perRound));
  }
  const median = (values: number[]) => stats(values).median;
  const [memoryBare, memoryInbox, memoryUnfingerprinted] = [median(times.bare), median(times.inbox), median(times.unfingerprinted)];
  const cpuOf = (mode: string) => reportedLines().find((l) => l.suite === 'core' && l.mode === mode)?.cpuUsPerMessage;
  const bare = cpuOf('bare transaction c8');
  const inboxed = cpuOf('withInbox c8');
  const us = (n: number | undefined) => (n === undefined ? '-' : n.toFixed(1));
  const added = bare === undefined || inboxed === undefined ? undefined : inboxed - bare;
  const javascript = memoryInbox - memoryBare;
  const table = [
    '| Node CPU per message, per-message mode (c8) | µs |',
    '|---|--:|',
    `| bare transaction c8 | ${us(bare)} |`,
    `| withInbox c8 | ${us(inboxed)} |`,
    `| added by inboxed (withInbox - bare) | ${us(added)} |`,
    `| of which: inboxed's JavaScript (withInbox - bare, both on an in-memory stand-in for the pool: ${us(memoryInbox)} - ${us(memoryBare)}) | ${us(javascript)} |`,
    `| of which, within that: fingerprint (canonical JSON + SHA-256: withInbox - withInbox with fingerprint: false, there) | ${us(memoryInbox - memoryUnfingerprinted)} |`,
    `| of which: the rest, not JavaScript: the driver and the kernel, and where PostgreSQL shares the cores, Node's share of waiting out its extra work per message | ${us(added === undefined ? undefined : added - javascript)} |`,
  ].join('\n');
  console.log(`\n${table}`);
  reportSection(
    'core',
    `Node CPU split, per-message mode (the c8 lines' CPU is the median over their rounds; the stand-in's, over 5 rounds of ${perRound} messages):\n\n${table}`,
  );
}

/**
 * Where inboxed's Node CPU per message goes in batch mode: the two pieces of its own work that
 * scale with the message, timed in isolation on the same payloads (fingerprint: canonical JSON +
 * SHA-256; SQL text: the claim and the completion check with inline literals, escaped by pg), set
 * against the measured CPU of the batch lines. The rest is the driver (bigger statements to send,
 * the claim's rows to parse) and per-message bookkeeping (validation, outcomes).
 */
async function reportNodeSplit(message: () => InboxMessage<Payload>): Promise<void> {
  const { fingerprintMessage } = await built<FingerprintModule>('fingerprint.js');
  const { InboxStore } = await built<StoreModule>('inbox-store.js');
  const { createInboxTables } = await built<SchemaModule>('schema.js');
  const batches = scaled(1_000, 50);
  const samples = Array.from({ length: BATCH_SIZE }, message);
  const store = new InboxStore(createInboxTables({ schema: SCHEMA }), 'bench-batch');
  const quote = (value: string) => pg.Client.prototype.escapeLiteral(value);
  const timePerMessage = (work: () => void) => {
    for (let i = 0; i < 100; i++) work(); // warm-up: JIT
    const cpu = process.cpuUsage();
    for (let i = 0; i < batches; i++) work();
    return cpuSince(cpu) / (batches * BATCH_SIZE);
  };
  let tid = 0;
  const fingerprintUs = timePerMessage(() => {
    for (const m of samples) fingerprintMessage(m);
  });
  const sqlUs = timePerMessage(() => {
    const rows = samples.map((m) => ({ messageId: m.id, fingerprint: 'f'.repeat(64), source: undefined, receivedAt: undefined }));
    store.claimText(rows, quote, 5000);
    store.verifyText(
      rows.map((r) => r.messageId),
      rows.map(() => `(${tid >> 7},${++tid & 127})`),
      quote,
    );
  });
  const cpuOf = (mode: string) => reportedLines().find((l) => l.suite === 'core' && l.mode.startsWith(mode))?.cpuUsPerMessage;
  const bare = cpuOf('bare batch');
  const minimal = cpuOf('hand-written minimal inbox');
  const inboxed = cpuOf('withInboxBatch');
  const us = (n: number | undefined) => (n === undefined ? '-' : n.toFixed(1));
  const added = bare === undefined || inboxed === undefined ? undefined : inboxed - bare;
  const rest = added === undefined ? undefined : added - fingerprintUs - sqlUs;
  const table = [
    '| Node CPU per message, batch mode | µs |',
    '|---|--:|',
    `| bare batch (the driver, the domain insert) | ${us(bare)} |`,
    `| hand-written minimal inbox | ${us(minimal)} |`,
    `| withInboxBatch | ${us(inboxed)} |`,
    `| added by inboxed (withInboxBatch - bare) | ${us(added)} |`,
    `| of which: fingerprint (canonical JSON + SHA-256), timed alone | ${us(fingerprintUs)} |`,
    `| of which: claim and completion check SQL text, timed alone | ${us(sqlUs)} |`,
    `| of which: the rest (driver: more to send and parse; validation, outcomes) | ${us(rest)} |`,
  ].join('\n');
  console.log(`\n${table}`);
  reportSection('core', `Node CPU split (per message, ${BATCH_SIZE} per batch; the batch lines' CPU is the median over their rounds):\n\n${table}`);
}
