/**
 * Kafka suite: pre-filled topics drained into PostgreSQL by every line in the same run, each run a
 * fresh consumer group reading from the beginning, in alternating order over several rounds:
 * - raw kafkajs eachBatch (decode + commit per fetched batch, no database), for context;
 * - bare batch: a hand-written eachBatch with the adapter's batching (chunks of `BATCH` records of
 *   a fetched batch, heartbeat between chunks), one transaction per chunk with the set-based
 *   insert, and only after COMMIT resolveOffset + commitOffsets (explicit, as the adapter commits:
 *   with autoCommit off, kafkajs' commitOffsetsIfNecessary commits nothing); no inbox table;
 * - `@inboxed/kafka` batch (withInboxBatch, the same insert), compared with bare batch;
 * - the adapter with a no-op batch processor (the adapter's own cost);
 * - bare per-message and `@inboxed/kafka` per-message (withInbox): one transaction and one offset
 *   commit per record.
 * All lines consume `CONCURRENCY` partitions at once. Every line is clocked per record from the
 * eachBatch call that hands it over to the offset commit that covers it (see broker-harness.ts), so
 * the group join (seconds on the mock) counts against no line.
 *
 * The broker is `KAFKA_BROKERS` when set, otherwise librdkafka's mock cluster started here (the
 * same one the tests use; needs gcc and librdkafka-dev).
 * Env: BENCH_SCALE, BENCH_ROUNDS (default 5), BENCH_KAFKA_CONCURRENCY (default 4), DATABASE_URL.
 */
import { type AnyInboxProcessor, migrate, withInbox, withInboxBatch } from '@inboxed/core';
import { createKafkaConsumer } from '@inboxed/kafka';
import { type KafkaMock, startKafkaMock } from '@inboxed/test-support/kafka-mock';
import { drizzle } from 'drizzle-orm/node-postgres';
import { type Consumer, type EachBatchPayload, Kafka, type KafkaMessage, logLevel } from 'kafkajs';
import { benchDatabaseUrl, benchPool, benchRounds, report, reportSection, scaled } from '../bench-kit.js';
import {
  createOrdersTable,
  expectRows,
  insertOrdersBare,
  insertOrdersInTx,
  messageUuid,
  type Order,
  type OrderMessage,
  orderOf,
  resetForLine,
  runLines,
  type Sample,
  Tracker,
  within,
} from '../broker-harness.js';

/**
 * Batch lines: at 30,000 the bare batch's rounds lasted 0.3-0.5 s and moved by up to 40% from one
 * round to the next; 90,000 makes them 1-1.5 s (inboxed's 3-4 s).
 */
const MESSAGES = scaled(90_000, 1000);
/** The lines without a database run ~2x faster than the batch lines: rounds of 3-4 s. */
const NO_DB_MESSAGES = 2 * MESSAGES;
/** Per-message lines: rounds of 4-8 s (1-3 s moved by up to 16% between runs). */
const SINGLE_MESSAGES = scaled(6_000, 200);
const PARTITIONS = 4;
const CONCURRENCY = Number(process.env.BENCH_KAFKA_CONCURRENCY ?? PARTITIONS);
const BATCH = 500;
const POOL_SIZE = 20;
const ROUNDS = benchRounds(5);
const GROUP_TIMINGS = { sessionTimeout: 3000, heartbeatInterval: 300, maxWaitTimeInMs: 100, rebalanceTimeout: 6000 };
const RUN_TIMEOUT_MS = 180_000;

const suffix = () => `${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;

/** The clock of the run in progress. */
let tracker: Tracker | undefined;

/**
 * A consumer whose eachBatch calls (records received) and offset commits (records settled: every
 * received offset below the committed one) report to the clock. The adapter and the hand-written
 * consumers get the same hooks.
 */
function instrument(consumer: Consumer): Consumer {
  const received = new Map<string, number[]>();
  const run = consumer.run.bind(consumer);
  const commitOffsets = consumer.commitOffsets.bind(consumer);
  return new Proxy(consumer, {
    get(target, property, receiver) {
      if (property === 'run') {
        return (config: Parameters<Consumer['run']>[0]) =>
          run({
            ...config,
            ...(config?.eachBatch && {
              eachBatch: (payload: EachBatchPayload) => {
                const key = `${payload.batch.topic}/${payload.batch.partition}`;
                const offsets = received.get(key) ?? [];
                received.set(key, offsets);
                const now = performance.now();
                for (const message of payload.batch.messages) {
                  tracker?.received(`${key}/${message.offset}`, now);
                  offsets.push(Number(message.offset));
                }
                return config.eachBatch!(payload);
              },
            }),
          });
      }
      if (property === 'commitOffsets') {
        return async (offsets: Parameters<Consumer['commitOffsets']>[0]) => {
          await commitOffsets(offsets);
          const now = performance.now();
          for (const { topic, partition, offset } of offsets) {
            const key = `${topic}/${partition}`;
            const pending = received.get(key) ?? [];
            let settled = 0;
            while (settled < pending.length && pending[settled]! < Number(offset)) tracker?.settled(`${key}/${pending[settled++]}`, now);
            pending.splice(0, settled);
          }
        };
      }
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

function decode(message: KafkaMessage): OrderMessage {
  return { id: String(message.headers?.['message-id']), order: JSON.parse(message.value!.toString()) as Order };
}

async function prefill(kafka: Kafka, topic: string, count: number, first: number): Promise<void> {
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  for (let start = 0; start < count; start += 2000) {
    const messages = [];
    for (let i = start; i < Math.min(count, start + 2000); i++) {
      const n = first + i;
      messages.push({ partition: i % PARTITIONS, headers: { 'message-id': messageUuid(n) }, value: JSON.stringify(orderOf(n)) });
    }
    await producer.send({ topic, acks: -1, messages });
  }
  await producer.disconnect();
}

export default async function kafkaSuite(): Promise<void> {
  let mock: KafkaMock | undefined;
  let brokers = process.env.KAFKA_BROKERS;
  if (!brokers) {
    mock = await startKafkaMock();
    brokers = mock.brokers;
  }
  const kafka = new Kafka({ clientId: 'inboxed-bench', brokers: brokers.split(','), logLevel: logLevel.NOTHING });
  /** The client handed to the adapter: its consumers are instrumented like the hand-written ones. */
  const adapterKafka = new Proxy(kafka, {
    get(target, property) {
      if (property === 'consumer') return (config: Parameters<Kafka['consumer']>[0]) => instrument(target.consumer(config));
      const value = Reflect.get(target, property);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const id = suffix();
  const bigTopic = `bench_orders_${id}`;
  const smallTopic = `bench_orders_single_${id}`;
  const noDbTopic = `bench_orders_no_db_${id}`;
  const schema = `bench_kafka_${id}`;
  const pool = benchPool(POOL_SIZE);
  try {
    await mock?.createTopic(bigTopic, PARTITIONS);
    await mock?.createTopic(smallTopic, PARTITIONS);
    await mock?.createTopic(noDbTopic, PARTITIONS);
    await prefill(kafka, bigTopic, MESSAGES, 1);
    await prefill(kafka, smallTopic, SINGLE_MESSAGES, MESSAGES + 1);
    await prefill(kafka, noDbTopic, NO_DB_MESSAGES, MESSAGES + SINGLE_MESSAGES + 1);
    await createOrdersTable(pool, schema);
    const db = drizzle(pool);
    await migrate(db, { schema });
    const ordersName = `"${schema}".orders`;
    const inboxName = `"${schema}".inbox`;
    const insert = insertOrdersInTx(schema);
    const tables = { schema };
    const batchProcessor = withInboxBatch<typeof db, Order>((messages, tx) => insert(messages, tx), { db, consumer: 'bench.batch', tables });
    const singleProcessor = withInbox<typeof db, Order>((message, tx) => insert([message], tx), { db, consumer: 'bench.single', tables });
    const noDatabase = Object.assign(
      async (messages: readonly { id: string }[]) => messages.map((m) => ({ status: 'processed' as const, messageId: m.id, consumer: 'bench.no-db' })),
      { kind: 'batch' as const, consumer: 'bench.no-db', checkTables: async () => {}, observe: () => {} },
    ) as unknown as AnyInboxProcessor;

    const failure = () => {
      let fail!: (error: unknown) => void;
      const failed = new Promise<never>((_, reject) => (fail = reject));
      failed.catch(() => undefined);
      return { failed, fail };
    };
    const start = async (count: number, truncate: string[]): Promise<Tracker> => {
      await resetForLine(pool, truncate);
      tracker = new Tracker(count);
      return tracker;
    };
    const finish = async (clock: Tracker, failed: Promise<never>, label: string): Promise<Sample> => {
      await within(Promise.race([clock.done, failed]), RUN_TIMEOUT_MS, label);
      tracker = undefined;
      return clock.sample();
    };

    /** A hand-written consumer of `topic`: `eachBatch` gets the instrumented consumer to commit with. */
    const handWritten = async (
      topic: string,
      count: number,
      label: string,
      truncate: string[],
      eachBatch: (consumer: Consumer, payload: EachBatchPayload) => Promise<void>,
    ): Promise<Sample> => {
      const clock = await start(count, truncate);
      const { failed, fail } = failure();
      const consumer = instrument(kafka.consumer({ groupId: `bench-${suffix()}`, ...GROUP_TIMINGS }));
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: CONCURRENCY,
        eachBatch: (payload) => eachBatch(consumer, payload).catch(fail),
      });
      const sample = await finish(clock, failed, label);
      await consumer.disconnect();
      return sample;
    };
    const commit = (consumer: Consumer, payload: EachBatchPayload, last: KafkaMessage) => {
      payload.resolveOffset(last.offset);
      return consumer.commitOffsets([{ topic: payload.batch.topic, partition: payload.batch.partition, offset: (BigInt(last.offset) + 1n).toString() }]);
    };

    const raw = () =>
      handWritten(noDbTopic, NO_DB_MESSAGES, 'raw', [], async (consumer, payload) => {
        const messages = payload.batch.messages;
        let sum = 0;
        for (const message of messages) sum += decode(message).order.amount;
        if (sum < 0) throw new Error('unreachable');
        if (messages.length > 0) await commit(consumer, payload, messages[messages.length - 1]!);
      });

    const bareBatch = async () => {
      const sample = await handWritten(bigTopic, MESSAGES, 'bare batch', [ordersName], async (consumer, payload) => {
        const messages = payload.batch.messages;
        for (let from = 0; from < messages.length; from += BATCH) {
          const chunk = messages.slice(from, from + BATCH);
          await insertOrdersBare(pool, schema, chunk.map(decode));
          await commit(consumer, payload, chunk[chunk.length - 1]!);
          if (from + BATCH < messages.length) await payload.heartbeat();
        }
      });
      await expectRows(pool, ordersName, MESSAGES, 'bare batch');
      return sample;
    };

    const bareSingle = async () => {
      const sample = await handWritten(smallTopic, SINGLE_MESSAGES, 'bare per-message', [ordersName], async (consumer, payload) => {
        for (const message of payload.batch.messages) {
          await insertOrdersBare(pool, schema, [decode(message)]);
          await commit(consumer, payload, message);
          // One fetch can hold thousands of records, which one at a time can outlast the session timeout:
          // without a heartbeat the group evicts this member (UNKNOWN_MEMBER_ID on the next commit). The
          // adapter heartbeats between its chunks for the same reason; kafkajs sends at most one per heartbeatInterval.
          await payload.heartbeat();
        }
      });
      await expectRows(pool, ordersName, SINGLE_MESSAGES, 'bare per-message');
      return sample;
    };

    const inboxed = async (handler: AnyInboxProcessor, topic: string, count: number, label: string, verify: boolean): Promise<Sample> => {
      const clock = await start(count, verify ? [ordersName, inboxName] : []);
      const { failed, fail } = failure();
      const consumer = createKafkaConsumer({
        kafka: adapterKafka,
        groupId: `bench-inboxed-${suffix()}`,
        topics: [topic],
        handler,
        batchSize: BATCH,
        consumerConfig: GROUP_TIMINGS,
        // The mock broker cannot serve kafkajs' idempotent producer (see @inboxed/kafka's README).
        idempotentDeadLetters: mock === undefined,
        partitionsConsumedConcurrently: CONCURRENCY,
      });
      consumer.on('error', fail);
      await consumer.start();
      const sample = await finish(clock, failed, label);
      await consumer.stop();
      if (verify) {
        await expectRows(pool, ordersName, count, label);
        await expectRows(pool, inboxName, count, label);
      }
      return sample;
    };

    const batchMode = `bare batch (${BATCH}/tx, commit after COMMIT)`;
    const singleMode = 'bare per-message (1 tx + 1 offset commit per record)';
    await runLines(
      'kafka',
      ROUNDS,
      [
        { mode: 'raw kafkajs eachBatch (decode + commit per fetch, no DB)', messages: NO_DB_MESSAGES, run: raw },
        { mode: batchMode, messages: MESSAGES, run: bareBatch },
        {
          mode: '@inboxed/kafka batch (withInboxBatch, same insert)',
          messages: MESSAGES,
          run: () => inboxed(batchProcessor, bigTopic, MESSAGES, '@inboxed/kafka batch', true),
          baseline: batchMode,
          target: { ratio: 0.8, perSecond: 20_000, text: '>= 0.80 of bare batch and >= 20,000 msg/s' },
        },
        {
          mode: '@inboxed/kafka batch, no-op processor (adapter cost only, no DB)',
          messages: NO_DB_MESSAGES,
          run: () => inboxed(noDatabase, noDbTopic, NO_DB_MESSAGES, 'adapter only', false),
        },
        { mode: singleMode, messages: SINGLE_MESSAGES, run: bareSingle },
        {
          mode: '@inboxed/kafka per-message (withInbox)',
          messages: SINGLE_MESSAGES,
          run: () => inboxed(singleProcessor, smallTopic, SINGLE_MESSAGES, '@inboxed/kafka per-message', true),
          baseline: singleMode,
        },
      ],
      report,
    );
    reportSection(
      'kafka',
      `${mock ? 'librdkafka mock broker (in-process cluster)' : `Kafka ${brokers}`}, PostgreSQL ${new URL(benchDatabaseUrl()).host}: ` +
        `${PARTITIONS} partitions consumed ${CONCURRENCY} at a time, ${ROUNDS} rounds, the lines' order reversed every other round, a fresh group per run. ` +
        'Throughput is records / (first eachBatch .. last offset commit), latency per record from its eachBatch call to the commit covering it ' +
        '(the commit follows the COMMIT). Domain insert: one `INSERT ... SELECT FROM unnest(arrays)` per transaction in every line.',
    );
  } finally {
    tracker = undefined;
    await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
    await pool.end();
    await mock?.stop();
  }
}
