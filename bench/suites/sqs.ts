/**
 * SQS benchmark against the fauxqs emulator (started in-process unless SQS_ENDPOINT is set) and
 * real PostgreSQL: raw receive + DeleteMessageBatch throughput next to the same messages consumed
 * end-to-end by createSqsConsumer (withInboxBatch into PostgreSQL, and withInbox per message), in
 * the same run, alternating rounds, best round kept. The emulator shares the CPU with the consumer,
 * so absolute numbers are the emulator's; the ratio is the point.
 */
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  DeleteQueueCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { migrate, withInbox, withInboxBatch, type AnyInboxProcessor, type InboxMessage } from '@inboxed/core';
import { createSqsConsumer } from '@inboxed/sqs';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigserial, jsonb, pgSchema, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { benchDatabaseUrl, printTable, rate } from '../bench-kit.js';

const SCHEMA = `bench_sqs_${process.pid}`;
const MESSAGES = 3_000;
const POLLERS = 4;
const ROUNDS = 2;
const effects = pgSchema(SCHEMA).table('effects', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  messageId: text('message_id').notNull(),
  payload: jsonb('payload'),
});

export default async function run(): Promise<void> {
  let stopEmulator = async () => {};
  let endpoint = process.env.SQS_ENDPOINT;
  if (endpoint === undefined) {
    const { startFauxqs } = await import('fauxqs');
    const server = await startFauxqs({ port: 0, logger: false });
    endpoint = server.address;
    stopEmulator = () => server.stop();
  }
  const client = new SQSClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' } });
  const pool = new pg.Pool({ connectionString: benchDatabaseUrl(), max: 10 });
  const db = drizzle(pool);
  await pool.query(`create schema "${SCHEMA}"`);
  await pool.query(`create table "${SCHEMA}".effects (id bigserial primary key, message_id text not null, payload jsonb)`);
  await migrate(db, { schema: SCHEMA });
  const queues: string[] = [];
  let seq = 0;
  const { QueueUrl: deadLetterQueueUrl } = await client.send(new CreateQueueCommand({ QueueName: `bench-sqs-${process.pid}-dlq` }));
  queues.push(deadLetterQueueUrl!);

  const filledQueue = async (): Promise<string> => {
    const { QueueUrl } = await client.send(
      new CreateQueueCommand({ QueueName: `bench-sqs-${process.pid}-${queues.length}`, Attributes: { VisibilityTimeout: '30' } }),
    );
    queues.push(QueueUrl!);
    const batches = Array.from({ length: MESSAGES / 10 }, () =>
      Array.from({ length: 10 }, (_, i) => {
        const id = `m-${++seq}`;
        return {
          Id: `e${i}`,
          MessageBody: JSON.stringify({ amount: seq, currency: 'EUR' }),
          MessageAttributes: { 'message-id': { DataType: 'String', StringValue: id } },
        };
      }),
    );
    for (let i = 0; i < batches.length; i += 20) {
      await Promise.all(batches.slice(i, i + 20).map((Entries) => client.send(new SendMessageBatchCommand({ QueueUrl, Entries }))));
    }
    return QueueUrl!;
  };

  const raw = async (): Promise<number> => {
    const queueUrl = await filledQueue();
    let done = 0;
    let finishedAt = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: POLLERS }, async () => {
        while (done < MESSAGES) {
          const { Messages = [] } = await client.send(
            new ReceiveMessageCommand({
              QueueUrl: queueUrl,
              MaxNumberOfMessages: 10,
              WaitTimeSeconds: 1,
              MessageAttributeNames: ['All'],
              MessageSystemAttributeNames: ['All'],
            }),
          );
          if (Messages.length === 0) continue;
          await client.send(
            new DeleteMessageBatchCommand({ QueueUrl: queueUrl, Entries: Messages.map((m, i) => ({ Id: `e${i}`, ReceiptHandle: m.ReceiptHandle })) }),
          );
          done += Messages.length;
          if (done >= MESSAGES && finishedAt === 0) finishedAt = performance.now();
        }
      }),
    );
    // Timed to the last delete, not to the other pollers' empty long polls.
    return MESSAGES / ((finishedAt - started) / 1000);
  };

  const endToEnd = async (handler: AnyInboxProcessor): Promise<number> => {
    const queueUrl = await filledQueue();
    const consumer = createSqsConsumer({ client, queueUrl, handler, concurrency: POLLERS, receiveMaxMessages: 10, waitTimeSeconds: 1, deadLetterQueueUrl });
    let processed = 0;
    let finished!: () => void;
    const allDone = new Promise<void>((resolve) => (finished = resolve));
    consumer.on('message_processed', () => ++processed === MESSAGES && finished());
    consumer.on('error', (error) => console.error(`sqs bench: ${error.code}: ${error.message}`));
    const started = performance.now();
    await consumer.start();
    await allDone;
    const seconds = (performance.now() - started) / 1000;
    await consumer.stop();
    return MESSAGES / seconds;
  };

  type Payload = { amount: number; currency: string };
  const batch = withInboxBatch<typeof db, Payload>(
    async (messages: InboxMessage<Payload>[], tx) => {
      await tx.insert(effects).values(messages.map((m) => ({ messageId: m.id, payload: m.payload })));
    },
    { db, consumer: 'bench-batch', tables: { schema: SCHEMA } },
  );
  const single = withInbox<typeof db, Payload>(
    async (m, tx) => {
      await tx.insert(effects).values({ messageId: m.id, payload: m.payload });
    },
    { db, consumer: 'bench-single', tables: { schema: SCHEMA } },
  );

  try {
    await raw(); // warm-up: HTTP connections, JIT, PostgreSQL plans
    await endToEnd(batch);
    let bestRaw = 0;
    let bestBatch = 0;
    let bestSingle = 0;
    for (let round = 0; round < ROUNDS; round++) {
      bestRaw = Math.max(bestRaw, await raw());
      bestBatch = Math.max(bestBatch, await endToEnd(batch));
      bestSingle = Math.max(bestSingle, await endToEnd(single));
    }
    printTable(
      `sqs: fauxqs emulator${process.env.SQS_ENDPOINT ? ` at ${endpoint}` : ' (in-process)'} + PostgreSQL ${new URL(benchDatabaseUrl()).host}, ${MESSAGES} msgs, ${POLLERS} pollers x 10/receive, best of ${ROUNDS} alternating rounds`,
      ['mode', 'throughput', 'ratio vs raw'],
      [
        ['raw ReceiveMessage + DeleteMessageBatch (no database)', rate(bestRaw), '1.00'],
        ['createSqsConsumer + withInboxBatch (1 tx per receive)', rate(bestBatch), (bestBatch / bestRaw).toFixed(2)],
        ['createSqsConsumer + withInbox (1 tx per message)', rate(bestSingle), (bestSingle / bestRaw).toFixed(2)],
      ],
    );
  } finally {
    for (const QueueUrl of queues) await client.send(new DeleteQueueCommand({ QueueUrl })).catch(() => undefined);
    await pool.query(`drop schema "${SCHEMA}" cascade`);
    await pool.end();
    client.destroy();
    await stopEmulator();
  }
}
