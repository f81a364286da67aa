/**
 * Kafka: end-to-end throughput of `@inboxed/kafka` in batch mode (withInboxBatch into
 * PostgreSQL, offsets committed after each chunk) next to raw kafkajs consumption of the same
 * pre-filled topic, measured in the same run.
 *
 * The broker is `KAFKA_BROKERS` when set, otherwise librdkafka's mock cluster started here (the
 * same one the tests use; needs gcc and librdkafka-dev). Both runs are timed from the first
 * record received to the last one settled, so the group join (about 3 s on the mock) is not
 * counted against either (each clock starts when the first batch has been handled).
 */
import { migrate, withInboxBatch, type InboxMessage } from '@inboxed/core';
import { createKafkaConsumer } from '@inboxed/kafka';
import { startKafkaMock, type KafkaMock } from '@inboxed/test-support/kafka-mock';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, text } from 'drizzle-orm/pg-core';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { benchDatabaseUrl, printTable, rate } from '../bench-kit.js';

const RECORDS = Number(process.env.KAFKA_BENCH_RECORDS ?? 20_000);
const PARTITIONS = 4;
const BATCH_SIZE = 500;
const GROUP_TIMINGS = { sessionTimeout: 3000, heartbeatInterval: 300, maxWaitTimeInMs: 100, rebalanceTimeout: 6000 };

const suffix = () => `${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;

async function prefill(kafka: Kafka, topic: string): Promise<void> {
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  const chunk = 2000;
  for (let start = 0; start < RECORDS; start += chunk) {
    const messages = [];
    for (let i = start; i < Math.min(RECORDS, start + chunk); i++) {
      messages.push({
        partition: i % PARTITIONS,
        headers: { 'message-id': `pay-${i}` },
        value: JSON.stringify({ id: i, amountCents: 100 + (i % 5000), currency: 'EUR' }),
      });
    }
    await producer.send({ topic, acks: -1, messages });
  }
  await producer.disconnect();
}

/** Resolves with the seconds between the first and the last of `RECORDS` settled records. */
function stopwatch(): { tick(n: number): void; done: Promise<number> } {
  let first = 0;
  let seen = 0;
  let finish: (seconds: number) => void = () => {};
  const done = new Promise<number>((resolve) => (finish = resolve));
  return {
    tick(n) {
      if (first === 0) first = performance.now();
      seen += n;
      if (seen >= RECORDS) finish((performance.now() - first) / 1000);
    },
    done,
  };
}

async function rawKafkajs(kafka: Kafka, topic: string): Promise<number> {
  const consumer = kafka.consumer({ groupId: `bench-raw-${suffix()}`, ...GROUP_TIMINGS });
  const watch = stopwatch();
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  // The same work minus the inbox: decode each value, commit once per batch.
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      let sum = 0;
      for (const message of batch.messages) sum += (JSON.parse(message.value!.toString()) as { amountCents: number }).amountCents;
      if (sum < 0) throw new Error('unreachable');
      if (batch.messages.length > 0) {
        await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: (BigInt(batch.lastOffset()) + 1n).toString() }]);
      }
      watch.tick(batch.messages.length);
    },
  });
  const seconds = await watch.done;
  await consumer.disconnect();
  return seconds;
}

async function inboxed(kafka: Kafka, topic: string, pool: pg.Pool, schema: string, idempotent: boolean, concurrency: number): Promise<number> {
  const db = drizzle(pool);
  await migrate(db, { schema });
  await pool.query(`create table "${schema}".payments (id integer primary key, amount_cents integer not null, currency text not null)`);
  const payments = pgSchema(schema).table('payments', {
    id: integer('id').primaryKey(),
    amountCents: integer('amount_cents').notNull(),
    currency: text('currency').notNull(),
  });
  const processor = withInboxBatch(
    async (messages: InboxMessage[], tx: any) => {
      await tx.insert(payments).values(messages.map((m) => m.payload as { id: number; amountCents: number; currency: string }));
    },
    { db, consumer: 'bench.payments', tables: { schema } },
  );
  const watch = stopwatch();
  const consumer = createKafkaConsumer({
    kafka,
    groupId: `bench-inboxed-${suffix()}`,
    topics: [topic],
    handler: processor,
    batchSize: BATCH_SIZE,
    consumerConfig: GROUP_TIMINGS,
    idempotentDeadLetters: idempotent,
    partitionsConsumedConcurrently: concurrency,
  });
  // Outcome events fire once a chunk's transaction committed, just before its offset commit.
  consumer.on('message_processed', () => watch.tick(1));
  consumer.on('duplicate', () => watch.tick(1));
  consumer.on('error', (error) => console.error('kafka bench consumer error:', error));
  await consumer.start();
  const seconds = await watch.done;
  await consumer.stop();
  const [row] = (await pool.query<{ n: number }>(`select count(*)::int as n from "${schema}".payments`)).rows;
  if (row?.n !== RECORDS) throw new Error(`expected ${RECORDS} payments, found ${row?.n}`);
  return seconds;
}

export default async function kafkaSuite(): Promise<void> {
  let mock: KafkaMock | undefined;
  let brokers = process.env.KAFKA_BROKERS;
  if (!brokers) {
    mock = await startKafkaMock();
    brokers = mock.brokers;
  }
  const kafka = new Kafka({ clientId: 'inboxed-bench', brokers: brokers.split(','), logLevel: logLevel.NOTHING });
  const topic = `bench_payments_${suffix()}`;
  const schema = `bench_kafka_${suffix()}`; // one schema per inboxed run, so each starts with an empty inbox
  const pool = new pg.Pool({ connectionString: benchDatabaseUrl(), max: 8 });
  try {
    await mock?.createTopic(topic, PARTITIONS);
    await prefill(kafka, topic);
    const raw = await rawKafkajs(kafka, topic);
    // The mock broker cannot serve kafkajs' idempotent producer (see @inboxed/kafka's README).
    const serial = await inboxed(kafka, topic, pool, `${schema}_1`, mock === undefined, 1);
    const parallel = await inboxed(kafka, topic, pool, `${schema}_4`, mock === undefined, PARTITIONS);
    const rawRate = RECORDS / raw;
    const row = (label: string, seconds: number) => [label, rate(RECORDS / seconds), seconds.toFixed(2), (RECORDS / seconds / rawRate).toFixed(2)];
    printTable(
      `Kafka (${RECORDS.toLocaleString('en-US')} pre-filled records, ${PARTITIONS} partitions, ${mock ? 'librdkafka mock broker' : brokers}; inboxed batch mode, ${BATCH_SIZE} per transaction)`,
      ['consumer', 'throughput', 'seconds', 'vs raw'],
      [
        ['raw kafkajs eachBatch (decode + commit)', rate(rawRate), raw.toFixed(2), '1.00'],
        row('@inboxed/kafka batch mode -> PostgreSQL', serial),
        row(`  same, partitionsConsumedConcurrently: ${PARTITIONS}`, parallel),
      ],
    );
  } finally {
    for (const name of [`${schema}_1`, `${schema}_4`]) await pool.query(`drop schema if exists "${name}" cascade`).catch(() => undefined);
    await pool.end();
    await mock?.stop();
  }
}
