/**
 * An order-consumer service on RabbitMQ with inboxed: every "order placed" message inserts exactly
 * one row into `orders` and adds its amount to the customer's running total, however often
 * RabbitMQ (or a retrying producer) delivers it.
 *
 *   pnpm --filter @inboxed/example-rabbitmq-orders start              # consume until SIGTERM/SIGINT
 *   pnpm --filter @inboxed/example-rabbitmq-orders start -- --publish 5  # also publish 5 demo orders first
 *
 * `--publish N` sends N orders plus a duplicate of the first, an order that fails once (retried
 * after a delay), an order with a negative amount (dead-lettered) and a message without an id
 * (dead-lettered). `--exit-when-idle` stops after the queue has been empty for two seconds.
 *
 * Env: AMQP_URL (default amqp://guest:guest@127.0.0.1:5672), DATABASE_URL (default
 * postgres://postgres@127.0.0.1:5432/test), QUEUE (default rabbitmq-orders.orders).
 */
import { parseArgs } from 'node:util';
import { createAmqpConsumer } from '@inboxed/amqp';
import { migrate, PermanentError, withInbox } from '@inboxed/core';
import amqp from 'amqplib';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, text, timestamp } from 'drizzle-orm/pg-core';
import pg from 'pg';

const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const QUEUE = process.env.QUEUE ?? 'rabbitmq-orders.orders';
// `pnpm start -- --publish 5` may pass the `--` through; it is not an argument of ours.
const { values: args } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: { publish: { type: 'string' }, 'exit-when-idle': { type: 'boolean' } },
});

interface OrderPlaced {
  orderId: string;
  customerId: string;
  amountCents: number;
}

// --- Database: the service's own tables, with the inbox tables in the same schema ------------------
const SCHEMA = 'rabbitmq_orders';
const shop = pgSchema(SCHEMA);
const orders = shop.table('orders', {
  orderId: text('order_id').primaryKey(),
  customerId: text('customer_id').notNull(),
  amountCents: integer('amount_cents').notNull(),
  placedAt: timestamp('placed_at', { withTimezone: true }).notNull().defaultNow(),
});
const customerTotals = shop.table('customer_totals', {
  customerId: text('customer_id').primaryKey(),
  totalCents: integer('total_cents').notNull(),
});

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' });
const db = drizzle(pool);
await db.execute(sql.raw(`create schema if not exists ${SCHEMA}`));
await db.execute(
  sql.raw(`create table if not exists ${SCHEMA}.orders (
  order_id text primary key, customer_id text not null, amount_cents integer not null, placed_at timestamptz not null default now())`),
);
await db.execute(sql.raw(`create table if not exists ${SCHEMA}.customer_totals (customer_id text primary key, total_cents integer not null)`));
await migrate(db, { schema: SCHEMA });

// --- The handler: plain domain writes through `tx`; inboxed makes them happen once per message id ---
const flakyOnce = new Set<string>();
const handleOrder = withInbox<typeof db, OrderPlaced>(
  async (message, tx) => {
    const order = message.payload;
    if (order.amountCents < 0) throw new PermanentError(`order ${order.orderId} has a negative amount`);
    if (order.orderId.endsWith('-flaky') && !flakyOnce.has(order.orderId)) {
      flakyOnce.add(order.orderId);
      throw new Error('payment service timed out'); // retryable: redelivered after the retry delay
    }
    await tx.insert(orders).values({ orderId: order.orderId, customerId: order.customerId, amountCents: order.amountCents });
    // Not idempotent on its own: exactly what the inbox protects.
    await tx
      .insert(customerTotals)
      .values({ customerId: order.customerId, totalCents: order.amountCents })
      .onConflictDoUpdate({ target: customerTotals.customerId, set: { totalCents: sql`${customerTotals.totalCents} + ${order.amountCents}` } });
  },
  {
    db,
    consumer: 'rabbitmq-orders.order-placed',
    tables: { schema: SCHEMA },
    maxAttempts: 5,
    parse: (payload) => {
      const order = payload as Partial<OrderPlaced>;
      if (typeof order?.orderId !== 'string' || typeof order.customerId !== 'string' || !Number.isInteger(order.amountCents)) {
        throw new Error('not an OrderPlaced message'); // dead-lettered as validation-failed
      }
      return order as OrderPlaced;
    },
  },
);

// --- The consumer ------------------------------------------------------------------------------------
const consumer = createAmqpConsumer({
  url: AMQP_URL,
  queue: QUEUE,
  queueOptions: { durable: true }, // the demo owns its work queue; in production it is often declared elsewhere
  handler: handleOrder,
  prefetch: 16,
  retryDelaysMs: [1_000, 10_000, 60_000],
});
const log = (...parts: unknown[]) => console.log(new Date().toISOString(), ...parts);
consumer.on('message_processed', (o) => log('processed ', o.messageId));
consumer.on('duplicate', (o) => log('duplicate ', o.messageId, '(acked, handler not run)'));
consumer.on('retry', (o) => log('retry     ', o.messageId, `attempt ${o.attempt}, ${o.error?.message}`));
consumer.on('dead_letter', (o, where) => log('dead-letter', o.messageId || '(no id)', `-> ${where} (${o.reason})`));
consumer.on('reconnect', ({ attempt }) => log('reconnected to RabbitMQ after', attempt, 'attempt(s)'));
consumer.on('error', (error) => log('error     ', error.code, error.message));

await consumer.start();
log(`consuming ${QUEUE} (dead letters in ${QUEUE}.dead-letter); Ctrl+C or SIGTERM to stop`);

// --- Optional demo traffic -----------------------------------------------------------------------------
if (args.publish !== undefined) {
  const count = Number(args.publish);
  const connection = await amqp.connect(AMQP_URL);
  const channel = await connection.createConfirmChannel();
  const run = Date.now().toString(36);
  const send = (order: unknown, messageId?: string) =>
    channel.sendToQueue(QUEUE, Buffer.from(JSON.stringify(order)), { messageId, contentType: 'application/json', persistent: true });
  for (let i = 1; i <= count; i++) send({ orderId: `${run}-${i}`, customerId: `customer-${i % 3}`, amountCents: 1000 * i }, `order-${run}-${i}`);
  send({ orderId: `${run}-1`, customerId: 'customer-1', amountCents: 1000 }, `order-${run}-1`); // a duplicate delivery
  send({ orderId: `${run}-flaky`, customerId: 'customer-0', amountCents: 500 }, `order-${run}-flaky`);
  send({ orderId: `${run}-bad`, customerId: 'customer-0', amountCents: -5 }, `order-${run}-bad`);
  send({ orderId: `${run}-anonymous`, customerId: 'customer-0', amountCents: 100 }); // no message id
  await channel.waitForConfirms();
  await connection.close();
  log(`published ${count + 4} demo messages`);
}

// --- Graceful shutdown: finish in-flight orders, ack them, then close ------------------------------
let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  log(`${signal}: stopping (in-flight orders finish first)`);
  await consumer.stop();
  const [totals] = await Promise.all([db.select().from(customerTotals)]);
  log('customer totals:', totals.map((t) => `${t.customerId}=${t.totalCents}`).join(', ') || '(none)');
  await pool.end();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

if (args['exit-when-idle']) {
  // Exits once the queue and its retry queues stayed empty for two seconds (for CI and the README demo).
  const probe = await amqp.connect(AMQP_URL);
  const channel = await probe.createChannel();
  let idleSince = Date.now();
  const timer = setInterval(async () => {
    let pending = 0;
    for (const name of [QUEUE, `${QUEUE}.retry.1000`, `${QUEUE}.retry.10000`, `${QUEUE}.retry.60000`]) pending += (await channel.checkQueue(name)).messageCount;
    if (pending > 0) idleSince = Date.now();
    else if (Date.now() - idleSince > 2000) {
      clearInterval(timer);
      await probe.close();
      await shutdown('idle');
    }
  }, 250);
}
