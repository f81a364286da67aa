/**
 * inboxed demo: pushes 10,000+ deliveries with heavy redelivery, concurrent copies, payload
 * conflicts, malformed ids and flaky handler failures through `withInbox`, then checks that every
 * unique message's effect was committed exactly once.
 *
 * Runs on embedded PGlite (no server needed), or on PostgreSQL when DATABASE_URL is set.
 */
import { PGlite } from '@electric-sql/pglite';
import { migrate, withInbox, type AnyPgDatabase, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import { sql } from 'drizzle-orm';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import pg from 'pg';

const UNIQUE_MESSAGES = 4_000;
const TARGET_DELIVERIES = 10_000;
const CONCURRENCY = 8;
const SCHEMA = `inboxed_demo_${process.pid}`;

// The service's own domain table: one row per applied order.
const orders = pgSchema(SCHEMA).table('orders', {
  orderId: text('order_id').primaryKey(),
  amountCents: integer('amount_cents').notNull(),
});

/** A tiny deterministic PRNG so every run tells the same story. */
function random(seed: number): () => number {
  return () => {
    seed = (seed * 1664525 + 1013904223) % 4294967296;
    return seed / 4294967296;
  };
}

async function openDatabase(): Promise<{ db: AnyPgDatabase; label: string; close(): Promise<void> }> {
  if (process.env.DATABASE_URL) {
    const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: CONCURRENCY + 2 });
    const url = new URL(process.env.DATABASE_URL);
    return { db: drizzleNodePg(pool), label: `PostgreSQL at ${url.host}${url.pathname}`, close: () => pool.end() };
  }
  const client = new PGlite();
  return { db: drizzlePglite(client), label: 'embedded PGlite (set DATABASE_URL to use PostgreSQL)', close: () => client.close() };
}

/** Checks and types the payload before any database work; a malformed one is dead-lettered. (zod's `Order.parse` fits here too.) */
function parseOrder(payload: unknown): { amountCents: number } {
  const amountCents = (payload as { amountCents?: unknown } | null)?.amountCents;
  if (typeof amountCents !== 'number' || !Number.isInteger(amountCents)) throw new TypeError('amountCents must be an integer');
  return { amountCents };
}

async function main(): Promise<void> {
  const { db, label, close } = await openDatabase();
  const rand = random(42);
  await db.execute(sql.raw(`create schema if not exists "${SCHEMA}"`));
  await db.execute(sql.raw(`create table if not exists "${SCHEMA}".orders (order_id text primary key, amount_cents integer not null)`));
  await migrate(db, { schema: SCHEMA });

  // 1 in 50 orders hits a flaky dependency on its first attempt (the broker retries it).
  const flaky = new Set(
    Array.from({ length: UNIQUE_MESSAGES }, (_, i) => i)
      .filter(() => rand() < 0.02)
      .map((i) => `order-${i}`),
  );
  const failedOnce = new Set<string>();

  const processOrder = withInbox(
    async (message, tx) => {
      if (flaky.has(message.id) && !failedOnce.has(message.id)) {
        failedOnce.add(message.id);
        throw new Error('payment service timed out');
      }
      // A plain insert: a second application of the same order would violate the primary key, so
      // the demo would crash loudly if the inbox ever let a duplicate through.
      await tx.insert(orders).values({ orderId: message.id, amountCents: message.payload.amountCents });
    },
    { db, consumer: 'demo.orders', tables: { schema: SCHEMA }, maxAttempts: 5, backoff: { baseDelayMs: 1 }, parse: parseOrder },
  );

  // The "broker": every order delivered 1-4 times, some copies at the same instant, plus a few
  // payload conflicts (id reused with another amount) and malformed messages.
  const payloads = new Map(Array.from({ length: UNIQUE_MESSAGES }, (_, i) => [`order-${i}`, { amountCents: 100 + i }]));
  const queue: InboxMessage[][] = [];
  let deliveries = 0; // planned first deliveries; retries add more
  for (const [id, payload] of payloads) {
    const copies = 1 + Math.floor(rand() * 4);
    const burst: InboxMessage[] = [];
    for (let c = 0; c < copies; c++) burst.push({ id, payload: { ...payload } });
    queue.push(rand() < 0.3 ? burst : burst.splice(0, 1));
    for (const late of burst) queue.push([late]);
    deliveries += copies;
  }
  // Then a replay storm (a rebalance, a publisher retrying) up to the target, salted with a few
  // conflicts (an id reused with another amount) and malformed ids.
  const extra = Math.max(1_000, TARGET_DELIVERIES - deliveries);
  for (let i = 1; i <= extra; i++) {
    const id = `order-${Math.floor(rand() * UNIQUE_MESSAGES)}`;
    if (i % 100 === 0) queue.push([{ id, payload: { amountCents: -1 } }]);
    else if (i % 333 === 0) queue.push([{ id: '', payload: {} }]);
    else queue.push([{ id, payload: { ...payloads.get(id)! } }]);
  }
  // Shuffle so redeliveries arrive out of order, as after a consumer crash.
  for (let i = queue.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [queue[i], queue[j]] = [queue[j]!, queue[i]!];
  }

  const tally: Record<InboxOutcome['status'], number> = { processed: 0, duplicate: 0, rejected: 0, conflict: 0, retry: 0, busy: 0, 'dead-letter': 0 };
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < queue.length) {
      const burst = queue[next++]!;
      // Copies in one burst are delivered concurrently: the database picks the winner.
      const outcomes = await Promise.all(burst.map((m) => processOrder(m)));
      outcomes.forEach((outcome, k) => {
        tally[outcome.status]++;
        if (outcome.status === 'retry') queue.push([burst[k]!]); // redelivered later
      });
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const seconds = (performance.now() - started) / 1000;

  const [{ effects }] = (await db.select({ effects: sql<number>`count(*)::int` }).from(orders)) as [{ effects: number }];
  const total = Object.values(tally).reduce((a, b) => a + b, 0);
  const rows: [string, number][] = [
    ['deliveries', total],
    ['unique ids', payloads.size],
    ['effects committed', Number(effects)],
    ['duplicates suppressed', tally.duplicate],
    ['conflicts (payload-mismatch)', tally.conflict],
    ['retries', tally.retry],
    ['dead-letters', tally['dead-letter'] + tally.conflict],
  ];
  console.log(`\ninboxed demo on ${label}: ${Math.round(total / seconds).toLocaleString('en-US')} deliveries/s\n`);
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) console.log(`  ${k.padEnd(width)}  ${v.toLocaleString('en-US').padStart(8)}`);
  console.log(`  (dead-letters = ${tally.conflict} conflicts + ${tally['dead-letter']} malformed ids; all dead-lettered with a reason)`);

  await db.execute(sql.raw(`drop schema "${SCHEMA}" cascade`));
  await close();
  if (Number(effects) !== payloads.size) {
    console.error(`\nFAIL: ${effects} effects for ${payloads.size} unique ids`);
    process.exit(1);
  }
  console.log('\nOK: effects committed = unique ids: every message applied exactly once.');
}

await main();
