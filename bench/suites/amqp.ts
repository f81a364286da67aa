/**
 * RabbitMQ suite: a pre-filled queue drained three ways in the same run, so the ratios compare
 * like with like on this machine: raw amqplib consume+ack (no database), `@inboxed/amqp` with a
 * per-message processor (one transaction per message), and with a batch processor (one
 * transaction per batch). Raw and batch runs alternate for ROUNDS rounds and the best of each is
 * reported, which keeps a noisy shared machine from deciding the ratio.
 * Env: AMQP_URL (default the local broker), DATABASE_URL (default the local test database),
 * BENCH_AMQP_MESSAGES (default 20000), BENCH_AMQP_BATCH (default 200), BENCH_AMQP_ROUNDS (default 2).
 */
import { createAmqpConsumer } from '@inboxed/amqp';
import { migrate, withInbox, withInboxBatch, type AnyInboxProcessor } from '@inboxed/core';
import amqp from 'amqplib';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { benchDatabaseUrl, printTable, rate } from '../bench-kit.js';

const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const MESSAGES = Number(process.env.BENCH_AMQP_MESSAGES ?? 20_000);
/** The per-message mode is ~10x slower; a quarter of the messages measures it just as well. */
const SINGLE_MESSAGES = Math.max(1000, Math.floor(MESSAGES / 4));
const BATCH_SIZE = Number(process.env.BENCH_AMQP_BATCH ?? 200);
const ROUNDS = Number(process.env.BENCH_AMQP_ROUNDS ?? 2);
const RAW_PREFETCH = 400;

let prefillRun = 0;
async function prefill(channel: amqp.ConfirmChannel, queue: string, count: number): Promise<void> {
  const tag = `r${++prefillRun}`;
  for (let i = 0; i < count; i++) {
    const body = Buffer.from(JSON.stringify({ orderId: prefillRun * 1_000_000 + i, amount: i % 100, customer: `c-${i % 997}` }));
    channel.sendToQueue(queue, body, { messageId: `${tag}-${i}`, contentType: 'application/json', persistent: true });
    if (i % 1000 === 999) await channel.waitForConfirms();
  }
  await channel.waitForConfirms();
}

/** Raw amqplib: consume and ack every message, nothing else. */
async function rawConsume(connection: amqp.ChannelModel, queue: string, count: number): Promise<number> {
  const channel = await connection.createChannel();
  await channel.prefetch(RAW_PREFETCH);
  let seen = 0;
  const started = performance.now();
  await new Promise<void>((resolve) => {
    void channel.consume(queue, (message) => {
      if (message === null) return;
      channel.ack(message);
      if (++seen === count) resolve();
    });
  });
  const seconds = (performance.now() - started) / 1000;
  await channel.close();
  return count / seconds;
}

/** `@inboxed/amqp` end to end: consume, one inbox transaction (per message or per batch), ack. */
async function inboxedConsume(queue: string, handler: AnyInboxProcessor, count: number): Promise<number> {
  const consumer = createAmqpConsumer({ url: AMQP_URL, queue, handler, batchSize: BATCH_SIZE, batchWaitMs: 20 });
  consumer.on('error', (error) => console.error('[bench amqp]', error));
  let done = 0;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const count1 = () => {
    if (++done === count) finish();
  };
  consumer.on('message_processed', count1);
  consumer.on('duplicate', count1);
  const started = performance.now();
  await consumer.start();
  await finished;
  const seconds = (performance.now() - started) / 1000;
  await consumer.stop();
  return count / seconds;
}

export default async function amqpSuite(): Promise<void> {
  const schema = `bench_amqp_${Date.now().toString(36)}`;
  const queue = `bench.amqp.${Date.now().toString(36)}`;
  const pool = new pg.Pool({ connectionString: benchDatabaseUrl(), max: 20 });
  const connection = await amqp.connect(AMQP_URL);
  const channel = await connection.createConfirmChannel();
  try {
    await channel.assertQueue(queue, { durable: true });
    await pool.query(`create schema "${schema}"`);
    await pool.query(
      `create table "${schema}".orders (order_id integer primary key, message_id text not null, amount integer not null, customer text not null)`,
    );
    const db = drizzle(pool);
    await migrate(db, { schema });
    const orders = pgSchema(schema).table('orders', {
      orderId: integer('order_id').primaryKey(),
      messageId: text('message_id').notNull(),
      amount: integer('amount').notNull(),
      customer: text('customer').notNull(),
    });
    type Order = { orderId: number; amount: number; customer: string };
    const tables = { schema };
    const single = withInbox<typeof db, Order>(
      async (message, tx) => {
        await tx.insert(orders).values({ ...message.payload, messageId: message.id });
      },
      { db, consumer: 'bench.single', tables },
    );
    // Set-based: one INSERT ... SELECT FROM unnest(arrays) for the whole batch, the way a
    // throughput-minded handler writes it (Drizzle's multi-row values() costs more client CPU).
    const batch = withInboxBatch<typeof db, Order>(
      async (messages, tx) => {
        await tx.execute(sql`insert into ${orders} (order_id, message_id, amount, customer)
        select * from unnest(${sql.param(messages.map((m) => m.payload.orderId))}::int[], ${sql.param(messages.map((m) => m.id))}::text[],
                             ${sql.param(messages.map((m) => m.payload.amount))}::int[], ${sql.param(messages.map((m) => m.payload.customer))}::text[])`);
      },
      { db, consumer: 'bench.batch', tables },
    );

    const raws: number[] = [];
    const batches: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      await prefill(channel, queue, MESSAGES);
      raws.push(await rawConsume(connection, queue, MESSAGES));
      await prefill(channel, queue, MESSAGES);
      batches.push(await inboxedConsume(queue, batch, MESSAGES));
    }
    // The adapter alone: the same batch pipeline with a processor that touches no database, to
    // separate the adapter's own cost (decode, collect, ack) from the inbox transaction's.
    const noDatabase = Object.assign(
      async (messages: readonly { id: string }[]) => messages.map((m) => ({ status: 'processed' as const, messageId: m.id, consumer: 'bench.no-db' })),
      { kind: 'batch' as const, consumer: 'bench.no-db', checkTables: async () => {}, observe: () => {} },
    );
    await prefill(channel, queue, MESSAGES);
    const adapterOnly = await inboxedConsume(queue, noDatabase, MESSAGES);
    await prefill(channel, queue, SINGLE_MESSAGES);
    const perMessage = await inboxedConsume(queue, single, SINGLE_MESSAGES);

    const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from "${schema}".orders`);
    const expected = ROUNDS * MESSAGES + SINGLE_MESSAGES;
    if (Number(rows[0]!.n) !== expected) throw new Error(`expected ${expected} orders, found ${rows[0]!.n}`);

    const raw = Math.max(...raws);
    const best = Math.max(...batches);
    const all = (xs: number[]) => xs.map((x) => Math.round(x).toLocaleString('en-US')).join(' / ');
    printTable(
      `RabbitMQ: pre-filled persistent messages into PostgreSQL (best of ${ROUNDS} rounds; all rounds in brackets)`,
      ['mode', 'messages', 'throughput', 'vs raw consume+ack'],
      [
        [`raw amqplib consume+ack (prefetch ${RAW_PREFETCH}, no DB)`, MESSAGES, `${rate(raw)} [${all(raws)}]`, '100%'],
        ['@inboxed/amqp per-message (prefetch 32)', SINGLE_MESSAGES, rate(perMessage), `${Math.round((100 * perMessage) / raw)}%`],
        [
          `@inboxed/amqp batch (size ${BATCH_SIZE}, prefetch ${4 * BATCH_SIZE})`,
          MESSAGES,
          `${rate(best)} [${all(batches)}]`,
          `${Math.round((100 * best) / raw)}% (target >= 50%)`,
        ],
        ['@inboxed/amqp batch, no-op processor (adapter cost only)', MESSAGES, rate(adapterOnly), `${Math.round((100 * adapterOnly) / raw)}%`],
      ],
    );
  } finally {
    const cleanup = await connection.createChannel();
    for (const name of [queue, `${queue}.dead-letter`, ...[1000, 5000, 30000, 120000, 600000].map((d) => `${queue}.retry.${d}`)]) {
      await cleanup.deleteQueue(name).catch(() => undefined);
    }
    await connection.close().catch(() => undefined);
    await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
    await pool.end();
  }
}
