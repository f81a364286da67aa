/**
 * SQS suite against the fauxqs emulator (started in-process unless SQS_ENDPOINT is set) and real
 * PostgreSQL. Every run drains a freshly filled queue with `POLLERS` concurrent long polls of 10
 * messages; the lines run in the same run, in alternating order over several rounds:
 * - raw ReceiveMessage + DeleteMessageBatch (no database), for context;
 * - bare batch: one transaction per receive with the set-based insert, and only after COMMIT one
 *   DeleteMessageBatch; no inbox table;
 * - `createSqsConsumer` + withInboxBatch (the same insert), compared with bare batch;
 * - the adapter with a no-op batch processor (the adapter's own cost);
 * - bare per-message and `createSqsConsumer` + withInbox: one transaction per message (the
 *   messages of a receive concurrently), then one DeleteMessageBatch for the receive.
 * Every line is clocked per message from the ReceiveMessage response to the end of the delete call
 * that removed it (see broker-harness.ts). The emulator shares the CPU with the consumers, so the
 * absolute numbers are the emulator's; the ratios are the point.
 * Env: SQS_ENDPOINT, DATABASE_URL, BENCH_SCALE, BENCH_ROUNDS (default 5).
 */
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  DeleteMessageCommand,
  DeleteQueueCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { type AnyInboxProcessor, migrate, withInbox, withInboxBatch } from '@inboxed/core';
import { createSqsConsumer } from '@inboxed/sqs';
import { drizzle } from 'drizzle-orm/node-postgres';
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
 * Rounds of 2-9 s: at 4,000 the adapter-only line moved by 11% between two runs, and at 6,000 the
 * lines without a database or in batch mode still lasted only 1-2 s.
 */
const MESSAGES = scaled(10_000, 200);
const POLLERS = 4;
const POOL_SIZE = 20;
const ROUNDS = benchRounds(5);
const RUN_TIMEOUT_MS = 180_000;

/** The clock of the run in progress. */
let tracker: Tracker | undefined;

/**
 * A client whose ReceiveMessage responses (messages received) and DeleteMessage(Batch) calls
 * (settled, once the call returned) report to the clock. The adapter and the hand-written
 * consumers use the same client.
 */
function instrument(client: SQSClient): SQSClient {
  const idOf = new Map<string, string>();
  const send = client.send.bind(client) as (command: unknown) => Promise<unknown>;
  return new Proxy(client, {
    get(target, property) {
      if (property === 'send') {
        return async (command: unknown) => {
          const result = await send(command);
          const now = performance.now();
          if (command instanceof ReceiveMessageCommand) {
            for (const m of (result as { Messages?: Message[] }).Messages ?? []) {
              idOf.set(m.ReceiptHandle!, m.MessageId!);
              tracker?.received(m.MessageId!, now);
            }
          } else if (command instanceof DeleteMessageBatchCommand) {
            const failed = new Set(((result as { Failed?: { Id?: string }[] }).Failed ?? []).map((f) => f.Id));
            for (const entry of command.input.Entries ?? []) {
              if (failed.has(entry.Id)) continue;
              const id = idOf.get(entry.ReceiptHandle!);
              if (id !== undefined) tracker?.settled(id, now);
            }
          } else if (command instanceof DeleteMessageCommand) {
            const id = idOf.get(command.input.ReceiptHandle!);
            if (id !== undefined) tracker?.settled(id, now);
          }
          return result;
        };
      }
      const value = Reflect.get(target, property);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

function decode(message: Message): OrderMessage {
  return { id: message.MessageAttributes?.['message-id']?.StringValue ?? '', order: JSON.parse(message.Body!) as Order };
}

export default async function sqsSuite(): Promise<void> {
  let stopEmulator = async () => {};
  let endpoint = process.env.SQS_ENDPOINT;
  if (endpoint === undefined) {
    const { startFauxqs } = await import('fauxqs');
    const server = await startFauxqs({ port: 0, logger: false });
    endpoint = server.address;
    stopEmulator = () => server.stop();
  }
  const plainClient = new SQSClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' } });
  const client = instrument(plainClient);
  const schema = `bench_sqs_${Date.now().toString(36)}`;
  const pool = benchPool(POOL_SIZE);
  const queues: string[] = [];
  let sequence = 0;
  try {
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
    const { QueueUrl: deadLetterQueueUrl } = await plainClient.send(new CreateQueueCommand({ QueueName: `${schema}-dlq` }));
    queues.push(deadLetterQueueUrl!);

    /** A new queue holding MESSAGES messages (not timed). */
    const filledQueue = async (): Promise<string> => {
      const { QueueUrl } = await plainClient.send(new CreateQueueCommand({ QueueName: `${schema}-${queues.length}`, Attributes: { VisibilityTimeout: '30' } }));
      queues.push(QueueUrl!);
      const batches = Array.from({ length: Math.ceil(MESSAGES / 10) }, (_, b) =>
        Array.from({ length: Math.min(10, MESSAGES - b * 10) }, (_, i) => {
          const n = ++sequence;
          return {
            Id: `e${i}`,
            MessageBody: JSON.stringify(orderOf(n)),
            MessageAttributes: { 'message-id': { DataType: 'String', StringValue: messageUuid(n) } },
          };
        }),
      );
      for (let i = 0; i < batches.length; i += 20) {
        await Promise.all(batches.slice(i, i + 20).map((Entries) => plainClient.send(new SendMessageBatchCommand({ QueueUrl, Entries }))));
      }
      return QueueUrl!;
    };
    const failure = () => {
      let fail!: (error: unknown) => void;
      const failed = new Promise<never>((_, reject) => (fail = reject));
      failed.catch(() => undefined);
      return { failed, fail };
    };

    /** Hand-written pollers: `handle` gets each receive's messages and deletes them when done. */
    const handWritten = async (label: string, truncate: string[], handle: (queueUrl: string, messages: Message[]) => Promise<void>): Promise<Sample> => {
      const queueUrl = await filledQueue();
      await resetForLine(pool, truncate);
      const clock = new Tracker(MESSAGES);
      tracker = clock;
      const { failed, fail } = failure();
      let stopped = false;
      const pollers = Promise.all(
        Array.from({ length: POLLERS }, async () => {
          while (!stopped) {
            const { Messages = [] } = await client.send(
              new ReceiveMessageCommand({
                QueueUrl: queueUrl,
                MaxNumberOfMessages: 10,
                WaitTimeSeconds: 1,
                MessageAttributeNames: ['All'],
                MessageSystemAttributeNames: ['All'],
              }),
            );
            if (Messages.length > 0) await handle(queueUrl, Messages);
          }
        }),
      ).catch(fail);
      await within(Promise.race([clock.done, failed]), RUN_TIMEOUT_MS, label);
      tracker = undefined;
      stopped = true;
      await pollers;
      return clock.sample();
    };
    const deleteAll = (queueUrl: string, messages: Message[]) =>
      client.send(new DeleteMessageBatchCommand({ QueueUrl: queueUrl, Entries: messages.map((m, i) => ({ Id: `e${i}`, ReceiptHandle: m.ReceiptHandle })) }));

    const raw = () =>
      handWritten('raw', [], async (queueUrl, messages) => {
        let sum = 0;
        for (const message of messages) sum += decode(message).order.amount;
        if (sum < 0) throw new Error('unreachable');
        await deleteAll(queueUrl, messages);
      });

    const bareBatch = async () => {
      const sample = await handWritten('bare batch', [ordersName], async (queueUrl, messages) => {
        await insertOrdersBare(pool, schema, messages.map(decode));
        await deleteAll(queueUrl, messages);
      });
      await expectRows(pool, ordersName, MESSAGES, 'bare batch');
      return sample;
    };

    const bareSingle = async () => {
      const sample = await handWritten('bare per-message', [ordersName], async (queueUrl, messages) => {
        await Promise.all(messages.map((m) => insertOrdersBare(pool, schema, [decode(m)])));
        await deleteAll(queueUrl, messages);
      });
      await expectRows(pool, ordersName, MESSAGES, 'bare per-message');
      return sample;
    };

    const inboxed = async (handler: AnyInboxProcessor, label: string, verify: boolean): Promise<Sample> => {
      const queueUrl = await filledQueue();
      await resetForLine(pool, verify ? [ordersName, inboxName] : []);
      const clock = new Tracker(MESSAGES);
      tracker = clock;
      const { failed, fail } = failure();
      const consumer = createSqsConsumer({ client, queueUrl, handler, concurrency: POLLERS, receiveMaxMessages: 10, waitTimeSeconds: 1, deadLetterQueueUrl });
      consumer.on('error', fail);
      await consumer.start();
      await within(Promise.race([clock.done, failed]), RUN_TIMEOUT_MS, label);
      tracker = undefined;
      await consumer.stop();
      if (verify) {
        await expectRows(pool, ordersName, MESSAGES, label);
        await expectRows(pool, inboxName, MESSAGES, label);
      }
      return clock.sample();
    };

    const batchMode = 'bare batch (1 tx per receive of 10, DeleteMessageBatch after COMMIT)';
    const singleMode = 'bare per-message (1 tx per message, DeleteMessageBatch per receive)';
    await raw(); // warm-up, not reported: HTTP connections, JIT, the emulator's first queues
    await runLines(
      'sqs',
      ROUNDS,
      [
        { mode: 'raw ReceiveMessage + DeleteMessageBatch (no DB)', messages: MESSAGES, run: raw },
        { mode: batchMode, messages: MESSAGES, run: bareBatch },
        {
          mode: '@inboxed/sqs batch (withInboxBatch, same insert)',
          messages: MESSAGES,
          run: () => inboxed(batchProcessor, '@inboxed/sqs batch', true),
          baseline: batchMode,
          target: { ratio: 0.8, text: '>= 0.80 of bare batch' },
        },
        { mode: '@inboxed/sqs batch, no-op processor (adapter cost only, no DB)', messages: MESSAGES, run: () => inboxed(noDatabase, 'adapter only', false) },
        { mode: singleMode, messages: MESSAGES, run: bareSingle },
        {
          mode: '@inboxed/sqs per-message (withInbox)',
          messages: MESSAGES,
          run: () => inboxed(singleProcessor, '@inboxed/sqs per-message', true),
          baseline: singleMode,
        },
      ],
      report,
    );
    reportSection(
      'sqs',
      `fauxqs emulator${process.env.SQS_ENDPOINT ? ` at ${endpoint}` : ' (in-process, sharing the CPU)'}, PostgreSQL ${new URL(benchDatabaseUrl()).host}: ` +
        `${POLLERS} pollers x 10 messages per receive (long poll 1 s), a fresh queue per run, ${ROUNDS} rounds, the lines' order reversed every other round. ` +
        'Throughput is messages / (first receive .. last delete), latency per message from its receive to the end of the delete call. ' +
        'Domain insert: one `INSERT ... SELECT FROM unnest(arrays)` per transaction in every line.',
    );
  } finally {
    tracker = undefined;
    for (const QueueUrl of queues) await plainClient.send(new DeleteQueueCommand({ QueueUrl })).catch(() => undefined);
    await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
    await pool.end();
    plainClient.destroy();
    await stopEmulator();
  }
}
