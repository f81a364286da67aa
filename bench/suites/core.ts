/**
 * Core benchmark on real PostgreSQL: the same handler (one domain insert) as a bare transaction
 * and under withInbox, at concurrency 1 and 8, then withInboxBatch with a set-based handler.
 * Each round measures bare and inbox back to back (alternating which goes first) and yields one
 * ratio; the reported figures are medians over the rounds, so a noisy neighbour on a shared
 * machine hurts both sides of a pair alike instead of skewing the ratio.
 */
import { migrate, withInbox, withInboxBatch, type InboxMessage } from '@inboxed/core';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigserial, jsonb, pgSchema, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { benchDatabaseUrl, measure, percentile, printTable, rate, type RunStats } from '../bench-kit.js';

const SCHEMA = `bench_core_${process.pid}`;
const effects = pgSchema(SCHEMA).table('effects', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  messageId: text('message_id').notNull(),
  payload: jsonb('payload'),
});

const ROUNDS = 7;
const PER_ROUND = { 1: 800, 8: 2_000 } as const;
const BATCH_SIZE = 100;
const BATCH_MESSAGES = 40_000;

export default async function run(): Promise<void> {
  const pool = new pg.Pool({ connectionString: benchDatabaseUrl(), max: 10 });
  const db = drizzle(pool);
  await pool.query(`create schema "${SCHEMA}"`);
  await pool.query(`create table "${SCHEMA}".effects (id bigserial primary key, message_id text not null, payload jsonb)`);
  await migrate(db, { schema: SCHEMA });

  let seq = 0;
  const message = (): InboxMessage<{ amount: number; currency: string }> => ({ id: `m-${++seq}`, payload: { amount: seq, currency: 'EUR' } });

  const bare = (m: InboxMessage<{ amount: number; currency: string }>) =>
    db.transaction(async (tx) => {
      await tx.insert(effects).values({ messageId: m.id, payload: m.payload });
    });
  const inbox = withInbox<typeof db, { amount: number; currency: string }>(
    async (m, tx) => {
      await tx.insert(effects).values({ messageId: m.id, payload: m.payload });
    },
    { db, consumer: 'bench', tables: { schema: SCHEMA } },
  );

  try {
    await measure(500, 8, () => bare(message())); // warm-up: connections, plans, caches
    await measure(500, 8, async () => void (await inbox(message())));

    const rows: (string | number)[][] = [];
    const ratios: string[] = [];
    for (const concurrency of [1, 8] as const) {
      const bares: RunStats[] = [];
      const inboxes: RunStats[] = [];
      const pairRatios: number[] = [];
      const runBare = () => measure(PER_ROUND[concurrency], concurrency, () => bare(message()));
      const runInbox = () =>
        measure(PER_ROUND[concurrency], concurrency, async () => {
          const outcome = await inbox(message());
          if (outcome.status !== 'processed') throw new Error(`unexpected ${outcome.status}`, { cause: outcome.error });
        });
      for (let round = 0; round < ROUNDS; round++) {
        const [b, i] = round % 2 === 0 ? [await runBare(), await runInbox()] : ([await runInbox(), await runBare()].reverse() as [RunStats, RunStats]);
        bares.push(b);
        inboxes.push(i);
        pairRatios.push(i.perSecond / b.perSecond);
      }
      const median = (runs: RunStats[]) => [...runs].sort((x, y) => x.perSecond - y.perSecond)[Math.floor(runs.length / 2)]!;
      const medianBare = median(bares);
      const medianInbox = median(inboxes);
      const ratio = percentile(pairRatios, 0.5);
      rows.push([`bare transaction`, concurrency, rate(medianBare.perSecond), medianBare.p50Ms.toFixed(2), medianBare.p99Ms.toFixed(2), '']);
      rows.push([`withInbox`, concurrency, rate(medianInbox.perSecond), medianInbox.p50Ms.toFixed(2), medianInbox.p99Ms.toFixed(2), ratio.toFixed(2)]);
      console.log(`  c${concurrency} paired ratios: ${[...pairRatios].map((r) => r.toFixed(2)).join(' ')}`);
      ratios.push(`c${concurrency}=${ratio.toFixed(2)}`);
    }

    // Set-based: one INSERT ... SELECT FROM unnest(arrays) for the whole batch.
    const batch = withInboxBatch<typeof db, { amount: number; currency: string }>(
      async (messages, tx) => {
        await tx.execute(sql`insert into ${effects} (message_id, payload)
        select * from unnest(${sql.param(messages.map((m) => m.id))}::text[], ${sql.param(messages.map((m) => JSON.stringify(m.payload)))}::jsonb[])`);
      },
      { db, consumer: 'bench-batch', tables: { schema: SCHEMA } },
    );
    const batches = BATCH_MESSAGES / BATCH_SIZE;
    const batchStats = await measure(batches, 4, async () => {
      const outcomes = await batch(Array.from({ length: BATCH_SIZE }, message));
      if (outcomes.some((o) => o.status !== 'processed')) throw new Error('unexpected batch outcome');
    });
    const batchRate = (batches * BATCH_SIZE) / batchStats.seconds;
    rows.push([`withInboxBatch (${BATCH_SIZE}/tx, 4 workers)`, 4, rate(batchRate), batchStats.p50Ms.toFixed(2), batchStats.p99Ms.toFixed(2), '']);

    printTable(
      `core: PostgreSQL ${new URL(benchDatabaseUrl()).host}, medians of ${ROUNDS} paired rounds (p50/p99 per message; per batch for batch rows)`,
      ['mode', 'conc', 'throughput', 'p50 ms', 'p99 ms', 'ratio'],
      rows,
    );
    console.log(`  per-message ratio withInbox/bare: ${ratios.join(', ')} (target >= 0.85 at c8); batch: ${rate(batchRate)} (target >= 25,000)`);
  } finally {
    await pool.query(`drop schema "${SCHEMA}" cascade`);
    await pool.end();
  }
}
