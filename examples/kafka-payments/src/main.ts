/**
 * kafka-payments: a Kafka consumer that books payments into PostgreSQL exactly once per payment
 * id, however often Kafka delivers them.
 *
 *   KAFKA_BROKERS=localhost:9092 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test pnpm start
 *
 * On start it seeds the topic with sample payments (every one produced twice, plus a malformed
 * record and a payment id reused with another amount) unless SEED=0, then consumes until
 * Ctrl-C, or until everything seeded has settled when EXIT_WHEN_DONE=1.
 */
import { migrate, reject, withInbox } from '@inboxed/core';
import { createKafkaConsumer } from '@inboxed/kafka';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';

const brokers = (process.env.KAFKA_BROKERS ?? 'localhost:9092').split(',');
const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const topic = process.env.TOPIC ?? 'payments';
const groupId = process.env.GROUP_ID ?? 'ledger';
const seedCount = process.env.SEED === '0' ? 0 : 20;

/** The domain table: one row per booked payment. */
const ledger = pgTable('ledger_entries', {
  paymentId: text('payment_id').primaryKey(),
  account: text('account').notNull(),
  amountCents: integer('amount_cents').notNull(),
});

interface Payment {
  account: string;
  amountCents: number;
}

/** Checks and types a payload before any database work; a malformed one is dead-lettered (`validation-failed`). */
function parsePayment(payload: unknown): Payment {
  const { account, amountCents } = (payload ?? {}) as Partial<Record<keyof Payment, unknown>>;
  if (typeof account !== 'string' || typeof amountCents !== 'number' || !Number.isInteger(amountCents)) {
    throw new TypeError('a payment needs an account (string) and amountCents (integer)');
  }
  return { account, amountCents };
}

const pool = new pg.Pool({ connectionString: databaseUrl });
const db = drizzle(pool);
await db.execute(sql`create table if not exists ledger_entries (payment_id text primary key, account text not null, amount_cents integer not null)`);
await migrate(db); // public.inbox and public.inbox_attempts

// The handler runs inside the inbox transaction: its write commits together with the inbox row,
// or not at all. A redelivered payment id never reaches it again.
const bookPayment = withInbox(
  async (message, tx) => {
    const { account, amountCents } = message.payload;
    if (amountCents <= 0) return reject('non-positive-amount'); // acked, recorded, never retried
    await tx.insert(ledger).values({ paymentId: message.id, account, amountCents });
    return undefined;
  },
  { db, consumer: 'ledger.payments', parse: parsePayment, maxAttempts: 5, backoff: { baseDelayMs: 500, maxDelayMs: 10_000 } },
);

const kafka = new Kafka({ clientId: 'kafka-payments-example', brokers, logLevel: logLevel.WARN });

async function seed(): Promise<number> {
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  const payments = Array.from({ length: seedCount }, (_, i) => ({
    key: `acct-${i % 4}`, // one account's payments stay in order on one partition
    headers: { 'message-id': `pay-${Date.now()}-${i}` },
    value: JSON.stringify({ account: `acct-${i % 4}`, amountCents: i === 3 ? 0 : 100 * (i + 1) }),
  }));
  const reused = payments[0]!;
  const extra = [
    { key: 'acct-x', headers: { 'message-id': `broken-${Date.now()}` }, value: '{"account": ' }, // not JSON: dead-lettered
    { ...reused, value: JSON.stringify({ account: 'acct-0', amountCents: 999_999 }) }, // same id, other payload: conflict
  ];
  // Every payment twice, as a producer retrying after a lost ack would.
  await producer.send({ topic, acks: -1, messages: [...payments, ...payments, ...extra] });
  await producer.disconnect();
  return payments.length * 2 + extra.length;
}

const expected = seedCount > 0 ? await seed() : 0;
const counts = { processed: 0, duplicate: 0, retry: 0, deadLettered: 0 };
let settled = 0;

const consumer = createKafkaConsumer({
  kafka,
  groupId,
  topics: [topic],
  handler: bookPayment,
  // Dead-letters go to `payments.dlq` with x-inboxed-* headers (reason, error, original offset).
  // The librdkafka mock broker cannot serve kafkajs' idempotent producer: set KAFKA_IDEMPOTENT_DLQ=false there.
  idempotentDeadLetters: process.env.KAFKA_IDEMPOTENT_DLQ !== 'false',
  consumerConfig: {
    sessionTimeout: Number(process.env.KAFKA_SESSION_TIMEOUT_MS ?? 30_000),
    heartbeatInterval: Number(process.env.KAFKA_HEARTBEAT_INTERVAL_MS ?? 3000),
  },
});

const done = () => {
  settled++;
  if (process.env.EXIT_WHEN_DONE === '1' && settled >= expected) void shutdown();
};
consumer.on('message_processed', (o) => {
  counts.processed++;
  console.log(`booked    ${o.messageId}${o.status === 'rejected' ? ` (rejected: ${o.reason})` : ''}`);
  done();
});
consumer.on('duplicate', (o) => {
  counts.duplicate++;
  console.log(`duplicate ${o.messageId}`);
  done();
});
consumer.on('retry', (o) => {
  counts.retry++;
  console.log(`retry     ${o.messageId} in ${o.retryAfterMs} ms: ${o.error?.message}`);
});
consumer.on('dead_letter', (o, destination) => {
  counts.deadLettered++;
  console.log(`dead      ${o.messageId} -> ${destination} (${o.reason})`);
  done();
});
consumer.on('error', (error) => console.error(`error     ${error.code}: ${error.message}`));

let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await consumer.stop(); // finishes in-flight work, commits it, disconnects
  const [row] = (await pool.query<{ n: number; total: number }>('select count(*)::int as n, coalesce(sum(amount_cents), 0)::int as total from ledger_entries'))
    .rows;
  console.log(`\nprocessed ${counts.processed}, duplicates ${counts.duplicate}, retries ${counts.retry}, dead-lettered ${counts.deadLettered}`);
  console.log(`ledger: ${row?.n} entries, ${row?.total} cents`);
  await pool.end();
  process.exit(0);
}
process.once('SIGINT', () => void shutdown());
process.once('SIGTERM', () => void shutdown());

await consumer.start();
console.log(`consuming ${topic} as group ${groupId} on ${brokers.join(',')}${expected ? ` (${expected} records seeded)` : ''}; Ctrl-C to stop`);
