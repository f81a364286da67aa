/**
 * RabbitMQ suite: pre-filled persistent messages drained into PostgreSQL by every line in the same
 * run, in alternating order over several rounds:
 * - raw amqplib consume + ack (no database): the broker's ceiling, for context;
 * - bare batch: a hand-written consumer with the adapter's batching (prefetch 4 x batch, batches of
 *   `BATCH` or what arrived within 20 ms), one transaction per batch with the set-based insert, and
 *   only after COMMIT `ack(lastTag, multiple)` (in delivery order); no inbox table;
 * - `@inboxed/amqp` batch (withInboxBatch, the same insert), compared with bare batch;
 * - the adapter with a no-op batch processor: the adapter's own cost (decode, collect, ack);
 * - bare per-message and `@inboxed/amqp` per-message (withInbox): one transaction per message,
 *   prefetch 32 each;
 * - the peer: pg-transactional-outbox's inbox (polling listener; this server's wal_level is not
 *   `logical`, which its replication listener needs) fed by an amqplib consumer that stores each
 *   delivery in the peer's inbox table and acks after that commit; the peer's listener then runs
 *   the same domain insert, one message per transaction.
 * Every line is clocked per message from delivery to ack (for the peer: to the commit of its
 * handler's transaction), see broker-harness.ts.
 * Env: AMQP_URL, DATABASE_URL, BENCH_SCALE (sizes), BENCH_ROUNDS (default 5), BENCH_AMQP_BATCH (default 200).
 */
import { type AmqpConnection, createAmqpConsumer } from '@inboxed/amqp';
import { type AnyInboxProcessor, migrate, withInbox, withInboxBatch } from '@inboxed/core';
import amqp from 'amqplib';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import {
  DatabaseSetup,
  type DatabaseClient,
  executeTransaction,
  type GeneralMessageHandler,
  getDisabledLogger,
  initializeMessageStorage,
  initializePollingMessageListener,
  type PollingListenerConfig,
  type TransactionalMessage,
} from 'pg-transactional-outbox';
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

const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
/**
 * Batch lines: at 20,000 the bare batch's rounds lasted about half a second and moved between 20k and
 * 48k msg/s from one round to the next, even with no other line running; 60,000 makes them 1.5-3 s
 * (inboxed's 3-5 s).
 */
const MESSAGES = scaled(60_000, 500);
/**
 * The lines without a database get as many: with twice as many waiting in the queue, RabbitMQ 3.10
 * delivered the raw line at 15-21k msg/s instead of 50-60k, below the bare batch line it is the
 * ceiling of.
 */
const NO_DB_MESSAGES = MESSAGES;
/** Per-message lines run ~10x slower; rounds of 4-10 s (1.5-4 s moved by up to 14% between runs). */
const SINGLE_MESSAGES = scaled(8_000, 200);
/** The peer drains ~150 msg/s here (its polling loop refills as single messages finish): rounds of ~13 s. */
const PEER_MESSAGES = scaled(2_000, 100);
const BATCH = Number(process.env.BENCH_AMQP_BATCH ?? 200);
const BATCH_WAIT_MS = 20;
const BATCH_PREFETCH = 4 * BATCH;
const SINGLE_PREFETCH = 32;
const POOL_SIZE = 20;
const ROUNDS = benchRounds(5);
/** The peer's polling listener: messages in flight at once (its `nextMessagesBatchSize`) and poll interval. */
const PEER_CONCURRENCY = Number(process.env.BENCH_AMQP_PEER_CONCURRENCY ?? 20);
const PEER_POLL_MS = 50;
const RUN_TIMEOUT_MS = 180_000;

/** The clock of the run in progress; the instrumented channels report to it. */
let tracker: Tracker | undefined;

/**
 * Hooks a channel's `consume` (a delivery is received) and `ack` (settled; `multiple` settles every
 * older outstanding delivery). The adapter and the hand-written consumers get the same hooks.
 */
function instrument<C extends amqp.Channel>(channel: C, settleOnAck = true): C {
  const outstanding: { tag: number; id: string }[] = [];
  const consume = channel.consume.bind(channel);
  channel.consume = ((queue: string, onMessage: (msg: amqp.ConsumeMessage | null) => void, options?: amqp.Options.Consume) =>
    consume(
      queue,
      (msg) => {
        if (msg !== null) {
          const id = String(msg.properties.messageId);
          tracker?.received(id);
          outstanding.push({ tag: msg.fields.deliveryTag, id });
        }
        onMessage(msg);
      },
      options,
    )) as C['consume'];
  const ack = channel.ack.bind(channel);
  channel.ack = ((msg: amqp.Message, allUpTo?: boolean) => {
    ack(msg, allUpTo);
    const tag = msg.fields.deliveryTag;
    const now = performance.now();
    if (allUpTo) {
      while (outstanding.length > 0 && outstanding[0]!.tag <= tag) {
        const { id } = outstanding.shift()!;
        if (settleOnAck) tracker?.settled(id, now);
      }
    } else {
      const i = outstanding.findIndex((o) => o.tag === tag);
      if (i >= 0) {
        if (settleOnAck) tracker?.settled(outstanding[i]!.id, now);
        outstanding.splice(i, 1);
      }
    }
  }) as C['ack'];
  const nack = channel.nack.bind(channel);
  channel.nack = ((msg: amqp.Message, allUpTo?: boolean, requeue?: boolean) => {
    nack(msg, allUpTo, requeue);
    const i = outstanding.findIndex((o) => o.tag === msg.fields.deliveryTag);
    if (i >= 0) outstanding.splice(i, 1);
  }) as C['nack'];
  return channel;
}

function decode(delivery: amqp.ConsumeMessage): OrderMessage {
  return { id: String(delivery.properties.messageId), order: JSON.parse(delivery.content.toString()) as Order };
}

export default async function amqpSuite(): Promise<void> {
  const suffix = Date.now().toString(36);
  const schema = `bench_amqp_${suffix}`;
  const peerSchema = `bench_amqp_peer_${suffix}`;
  const queue = `bench.amqp.${suffix}`;
  const pool = benchPool(POOL_SIZE);
  const connection = await amqp.connect(AMQP_URL);
  const prefillChannel = await connection.createConfirmChannel();
  /** The connection handed to the adapter: its channels are instrumented like the hand-written consumers'. */
  const adapterConnection: AmqpConnection = {
    createChannel: async () => instrument(await connection.createChannel()),
    createConfirmChannel: () => connection.createConfirmChannel(),
    close: async () => {},
    on: (event, listener) => connection.on(event, listener),
    off: (event, listener) => connection.off(event, listener),
  };
  const { wal_level } = (await pool.query<{ wal_level: string }>('show wal_level')).rows[0]!;

  let sequence = 0;
  const prefill = async (count: number): Promise<void> => {
    for (let i = 0; i < count; i++) {
      const n = ++sequence;
      prefillChannel.sendToQueue(queue, Buffer.from(JSON.stringify(orderOf(n))), {
        messageId: messageUuid(n),
        contentType: 'application/json',
        persistent: true,
      });
      if (i % 1000 === 999) await prefillChannel.waitForConfirms();
    }
    await prefillChannel.waitForConfirms();
  };

  try {
    await prefillChannel.assertQueue(queue, { durable: true });
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

    // The peer's inbox table, polling function and indexes, from its own setup helper.
    const peerSetup = {
      outboxOrInbox: 'inbox' as const,
      database: 'test',
      schema: peerSchema,
      table: 'inbox',
      listenerRole: 'postgres',
      nextMessagesName: 'next_inbox_messages',
    };
    await pool.query(`create schema "${peerSchema}"`);
    await pool.query(DatabaseSetup.dropAndCreateTable(peerSetup));
    await pool.query(DatabaseSetup.createPollingFunction(peerSetup));
    // Its index script also drops same-named indexes unqualified (on the search path): only the creates run here.
    await pool.query(DatabaseSetup.setupPollingIndexes(peerSetup).replace(/^DROP INDEX.*$/gm, ''));
    const peerInboxName = `"${peerSchema}".inbox`;

    /** Starts the clock for `count` messages, pre-fills them, empties the tables and lets the machine settle (none timed). */
    const prepare = async (count: number, truncate: string[]): Promise<Tracker> => {
      await prefill(count);
      await resetForLine(pool, truncate);
      tracker = new Tracker(count);
      return tracker;
    };
    const finish = async (clock: Tracker, failed: Promise<never>, label: string): Promise<Sample> => {
      await within(Promise.race([clock.done, failed]), RUN_TIMEOUT_MS, label);
      tracker = undefined;
      return clock.sample();
    };
    const failure = () => {
      let fail!: (error: unknown) => void;
      const failed = new Promise<never>((_, reject) => (fail = reject));
      failed.catch(() => undefined);
      return { failed, fail };
    };

    const raw = async (): Promise<Sample> => {
      const clock = await prepare(NO_DB_MESSAGES, []);
      const channel = instrument(await connection.createChannel());
      await channel.prefetch(BATCH_PREFETCH);
      let seen = 0;
      await channel.consume(queue, (delivery) => {
        if (delivery === null) return;
        // One `multiple` ack per BATCH deliveries, as the batch lines ack.
        if (++seen % BATCH === 0 || seen === NO_DB_MESSAGES) channel.ack(delivery, true);
      });
      const sample = await finish(clock, new Promise<never>(() => {}), 'raw');
      await channel.close();
      return sample;
    };

    const bareBatch = async (): Promise<Sample> => {
      const clock = await prepare(MESSAGES, [ordersName]);
      const { failed, fail } = failure();
      const channel = instrument(await connection.createChannel());
      await channel.prefetch(BATCH_PREFETCH);
      // Batches commit concurrently; acks go out in delivery order, as a `multiple` ack covers every older delivery.
      const inFlight: { last: number; committed: boolean }[] = [];
      const ackCommitted = () => {
        let last: number | undefined;
        while (inFlight.length > 0 && inFlight[0]!.committed) last = inFlight.shift()!.last;
        if (last !== undefined) channel.ack({ fields: { deliveryTag: last } } as amqp.Message, true);
      };
      let pending: amqp.ConsumeMessage[] = [];
      let timer: NodeJS.Timeout | undefined;
      const processPending = () => {
        clearTimeout(timer);
        timer = undefined;
        const batch = pending;
        pending = [];
        const entry = { last: batch[batch.length - 1]!.fields.deliveryTag, committed: false };
        inFlight.push(entry);
        insertOrdersBare(pool, schema, batch.map(decode)).then(() => {
          entry.committed = true;
          ackCommitted();
        }, fail);
      };
      await channel.consume(queue, (delivery) => {
        if (delivery === null) return;
        pending.push(delivery);
        if (pending.length >= BATCH) processPending();
        else if (timer === undefined) timer = setTimeout(processPending, BATCH_WAIT_MS);
      });
      const sample = await finish(clock, failed, 'bare batch');
      await channel.close();
      await expectRows(pool, ordersName, MESSAGES, 'bare batch');
      return sample;
    };

    const bareSingle = async (): Promise<Sample> => {
      const clock = await prepare(SINGLE_MESSAGES, [ordersName]);
      const { failed, fail } = failure();
      const channel = instrument(await connection.createChannel());
      await channel.prefetch(SINGLE_PREFETCH);
      await channel.consume(queue, (delivery) => {
        if (delivery === null) return;
        insertOrdersBare(pool, schema, [decode(delivery)]).then(() => channel.ack(delivery), fail);
      });
      const sample = await finish(clock, failed, 'bare per-message');
      await channel.close();
      await expectRows(pool, ordersName, SINGLE_MESSAGES, 'bare per-message');
      return sample;
    };

    const inboxed = async (handler: AnyInboxProcessor, count: number, label: string, verify: boolean): Promise<Sample> => {
      const clock = await prepare(count, verify ? [ordersName, inboxName] : []);
      const { failed, fail } = failure();
      const consumer = createAmqpConsumer({ connection: adapterConnection, queue, handler, batchSize: BATCH, batchWaitMs: BATCH_WAIT_MS });
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

    const peer = async (): Promise<Sample> => {
      const clock = await prepare(PEER_MESSAGES, [ordersName, peerInboxName]);
      const { failed, fail } = failure();
      const listenerConfig = { connectionString: benchDatabaseUrl() };
      const config: PollingListenerConfig = {
        outboxOrInbox: 'inbox',
        dbListenerConfig: listenerConfig,
        dbHandlerConfig: listenerConfig,
        settings: {
          dbSchema: peerSchema,
          dbTable: 'inbox',
          enableMaxAttemptsProtection: true,
          enablePoisonousMessageProtection: true,
          nextMessagesFunctionSchema: peerSchema,
          nextMessagesFunctionName: 'next_inbox_messages',
          nextMessagesBatchSize: PEER_CONCURRENCY,
          nextMessagesPollingIntervalInMs: PEER_POLL_MS,
        },
      };
      const logger = getDisabledLogger();
      const store = initializeMessageStorage(config, logger);
      // Ids whose handler ran in the transaction in progress (the listener skips a message it cannot lock, and commits nothing then).
      const handled = new Set<string>();
      const handler: GeneralMessageHandler = {
        handle: async (message: TransactionalMessage, client: DatabaseClient) => {
          const order = message.payload as Order;
          await client.query(
            `insert into ${ordersName} (order_id, message_id, amount, customer) select * from unnest($1::int[], $2::text[], $3::int[], $4::text[])`,
            [[order.orderId], [message.id], [order.amount], [order.customer]],
          );
          handled.add(message.id);
        },
      };
      // The handler's transactions run on this pool; a message is settled when its client is released after COMMIT.
      const handlerPool = new pg.Pool({ connectionString: benchDatabaseUrl(), max: POOL_SIZE });
      const [shutdown] = initializePollingMessageListener(config, handler, logger, {
        messageProcessingDbClientStrategy: {
          getClient: async (message) => {
            const client = await handlerPool.connect();
            const release = client.release.bind(client);
            client.release = (error?: Error | boolean) => {
              if (error === undefined && handled.delete(message.id)) tracker?.settled(message.id);
              return release(error);
            };
            return client;
          },
          shutdown: () => handlerPool.end(),
        },
      });
      // The receiver, as in the peer's RabbitMQ example: one transaction per delivery that stores it in the inbox, then ack.
      const channel = instrument(await connection.createChannel(), false);
      await channel.prefetch(SINGLE_PREFETCH);
      await channel.consume(queue, (delivery) => {
        if (delivery === null) return;
        const { id, order } = decode(delivery);
        const message: TransactionalMessage = {
          id,
          aggregateType: 'order',
          aggregateId: String(order.orderId),
          messageType: 'order_placed',
          concurrency: 'parallel',
          payload: order,
        };
        pool.connect().then((client) => executeTransaction(client, (tx) => store(message, tx)).then(() => channel.ack(delivery)), fail);
      });
      const sample = await finish(clock, failed, 'peer');
      await channel.close();
      await shutdown();
      await expectRows(pool, ordersName, PEER_MESSAGES, 'peer');
      await expectRows(pool, peerInboxName, PEER_MESSAGES, 'peer', 'where processed_at is not null');
      return sample;
    };

    const batchMode = `bare batch (${BATCH}/tx, prefetch ${BATCH_PREFETCH}, ack multiple after COMMIT)`;
    const singleMode = `bare per-message (1 tx/msg, prefetch ${SINGLE_PREFETCH})`;
    await runLines(
      'amqp',
      ROUNDS,
      [
        { mode: `raw amqplib consume + ack (prefetch ${BATCH_PREFETCH}, ack multiple per ${BATCH}, no DB)`, messages: NO_DB_MESSAGES, run: raw },
        { mode: batchMode, messages: MESSAGES, run: bareBatch },
        {
          mode: '@inboxed/amqp batch (withInboxBatch, same insert)',
          messages: MESSAGES,
          run: () => inboxed(batchProcessor, MESSAGES, '@inboxed/amqp batch', true),
          baseline: batchMode,
          target: { ratio: 0.8, text: '>= 0.80 of bare batch' },
        },
        {
          mode: '@inboxed/amqp batch, no-op processor (adapter cost only, no DB)',
          messages: NO_DB_MESSAGES,
          run: () => inboxed(noDatabase, NO_DB_MESSAGES, 'adapter only', false),
        },
        { mode: singleMode, messages: SINGLE_MESSAGES, run: bareSingle },
        {
          mode: `@inboxed/amqp per-message (withInbox, prefetch ${SINGLE_PREFETCH})`,
          messages: SINGLE_MESSAGES,
          run: () => inboxed(singleProcessor, SINGLE_MESSAGES, '@inboxed/amqp per-message', true),
          baseline: singleMode,
        },
        {
          mode: `peer: pg-transactional-outbox 0.5.7 inbox (polling listener, ${PEER_CONCURRENCY} in flight, poll ${PEER_POLL_MS} ms)`,
          messages: PEER_MESSAGES,
          run: peer,
          baseline: singleMode,
          note:
            `amqplib receiver stores each delivery in the peer's inbox table (1 tx, prefetch ${SINGLE_PREFETCH}) and acks; the peer's polling listener then runs ` +
            `the same insert, 1 tx per message; latency is delivery to the commit of that transaction. Polling, not logical replication: ` +
            `this server's wal_level is '${wal_level}' (the replication listener needs 'logical' and a restart).`,
        },
      ],
      report,
    );
    reportSection(
      'amqp',
      `RabbitMQ ${new URL(AMQP_URL).host}, PostgreSQL ${new URL(benchDatabaseUrl()).host}: ${ROUNDS} rounds, the lines' order reversed every other round. ` +
        'Throughput is messages / (first delivery .. last ack), latency per message from delivery to ack (the ack follows the COMMIT). ' +
        `Domain insert: one \`INSERT ... SELECT FROM unnest(arrays)\` per transaction in every line. Pool of ${POOL_SIZE} connections.`,
    );
  } finally {
    tracker = undefined;
    const cleanup = await connection.createChannel();
    for (const name of [queue, `${queue}.dead-letter`, ...[1000, 5000, 30000, 120000, 600000].map((d) => `${queue}.retry.${d}`)]) {
      await cleanup.deleteQueue(name).catch(() => undefined);
    }
    await connection.close().catch(() => undefined);
    await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
    await pool.query(`drop schema if exists "${peerSchema}" cascade`).catch(() => undefined);
    await pool.end();
  }
}
