/**
 * A notification worker on SQS with inboxed: each "send notification" message records exactly one
 * row in `notifications_sent`, however often SQS delivers it.
 *
 *   pnpm --filter @inboxed/example-sqs-notifications start
 *
 * With SQS_ENDPOINT / QUEUE_URL unset it starts the fauxqs emulator in-process, creates the queue and
 * its DLQ, publishes a few demo messages (a duplicate, a flaky one, a poison one, an unparseable
 * one), prints what happened and exits. With QUEUE_URL set it runs until SIGINT/SIGTERM.
 *
 * Env: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), SQS_ENDPOINT, QUEUE_URL,
 * DEAD_LETTER_QUEUE_URL, AWS_REGION (default us-east-1).
 */
import { CreateQueueCommand, GetQueueAttributesCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { migrate, PermanentError, withInbox } from '@inboxed/core';
import { createSqsConsumer } from '@inboxed/sqs';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, text, timestamp } from 'drizzle-orm/pg-core';
import pg from 'pg';

interface Notification {
  userId: string;
  channel: 'email' | 'sms';
  template: string;
}

// The domain table of this worker, in its own schema next to the inbox tables.
const SCHEMA = 'notifications_demo';
const demo = pgSchema(SCHEMA);
const notificationsSent = demo.table('notifications_sent', {
  messageId: text('message_id').primaryKey(),
  userId: text('user_id').notNull(),
  channel: text('channel').notNull(),
  template: text('template').notNull(),
  attempt: integer('attempt').notNull(),
  sentAt: timestamp('sent_at', { withTimezone: true }).notNull().defaultNow(),
});

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' });
const db = drizzle(pool);
await db.execute(sql.raw(`create schema if not exists ${SCHEMA}`));
await db.execute(
  sql.raw(`create table if not exists ${SCHEMA}.notifications_sent (
    message_id text primary key, user_id text not null, channel text not null, template text not null,
    attempt integer not null, sent_at timestamptz not null default now())`),
);
await migrate(db, { schema: SCHEMA });

// --- SQS: a real endpoint, or the emulator for a self-contained demo -------------------------------
let emulator: { address: string; stop(): Promise<void> } | undefined;
let endpoint = process.env.SQS_ENDPOINT;
if (endpoint === undefined && process.env.QUEUE_URL === undefined) {
  const { startFauxqs } = await import('fauxqs');
  emulator = await startFauxqs({ port: 0, logger: false });
  endpoint = emulator.address;
  console.log(`started the fauxqs SQS emulator at ${endpoint}`);
}
const client = new SQSClient({
  region: process.env.AWS_REGION ?? 'us-east-1',
  ...(endpoint !== undefined ? { endpoint, credentials: { accessKeyId: 'test', secretAccessKey: 'test' } } : {}),
});
const demoMode = process.env.QUEUE_URL === undefined;
const deadLetterQueueUrl =
  process.env.DEAD_LETTER_QUEUE_URL ?? (demoMode ? (await client.send(new CreateQueueCommand({ QueueName: 'notifications-dlq' }))).QueueUrl! : undefined);
const queueUrl =
  process.env.QUEUE_URL ?? (await client.send(new CreateQueueCommand({ QueueName: 'notifications', Attributes: { VisibilityTimeout: '10' } }))).QueueUrl!;

// --- The handler: all writes through `tx`, committed with the inbox row ----------------------------
let flakyFailures = 0;
const processor = withInbox<typeof db, Notification>(
  async (message, tx, { attempt }) => {
    const { userId, channel, template } = message.payload;
    if (channel !== 'email' && channel !== 'sms') throw new PermanentError(`unknown channel ${String(channel)}`);
    if (template === 'flaky' && flakyFailures++ < 1) throw new Error('template service timed out');
    await tx.insert(notificationsSent).values({ messageId: message.id, userId, channel, template, attempt });
  },
  { db, consumer: 'notifications.send', tables: { schema: SCHEMA }, maxAttempts: 5, backoff: { baseDelayMs: 1000 } },
);

const consumer = createSqsConsumer({
  client,
  queueUrl,
  deadLetterQueueUrl,
  handler: processor,
  concurrency: 2,
  waitTimeSeconds: demoMode ? 1 : 20,
});
const counts: Record<string, number> = {};
const count = (what: string, line: string) => {
  counts[what] = (counts[what] ?? 0) + 1;
  console.log(line);
};
consumer.on('message_processed', (o) => count('processed', `processed  ${o.messageId}`));
consumer.on('duplicate', (o) => count('duplicate', `duplicate  ${o.messageId} (acked, handler not run)`));
consumer.on('retry', (o) => count('retry', `retry      ${o.messageId} in ${o.retryAfterMs} ms: ${o.error?.message}`));
consumer.on('dead_letter', (o, where) => count('dead-letter', `dead-letter ${o.messageId} (${o.reason}) -> ${where}`));
consumer.on('error', (error) => console.error(`error      ${error.code}: ${error.message}`));

const shutdown = async () => {
  await consumer.stop();
  await pool.end();
  client.destroy();
  await emulator?.stop();
};
process.once('SIGINT', () => void shutdown().then(() => process.exit(0)));
process.once('SIGTERM', () => void shutdown().then(() => process.exit(0)));

await consumer.start();
console.log(`consuming ${queueUrl}${deadLetterQueueUrl ? ` (dead letters -> ${deadLetterQueueUrl})` : ''}`);

if (demoMode) {
  const runId = Date.now().toString(36);
  const publish = (id: string, body: string) =>
    client.send(
      new SendMessageCommand({
        QueueUrl: queueUrl,
        MessageBody: body,
        MessageAttributes: { 'message-id': { DataType: 'String', StringValue: `${runId}-${id}` } },
      }),
    );
  const notify = (n: Notification) => JSON.stringify(n);
  await publish('welcome-1', notify({ userId: 'u1', channel: 'email', template: 'welcome' }));
  await publish('welcome-1', notify({ userId: 'u1', channel: 'email', template: 'welcome' })); // producer retry
  await publish('reset-2', notify({ userId: 'u2', channel: 'sms', template: 'password-reset' }));
  await publish('flaky-3', notify({ userId: 'u3', channel: 'email', template: 'flaky' }));
  await publish('pigeon-4', JSON.stringify({ userId: 'u4', channel: 'pigeon', template: 'welcome' }));
  await publish('garbled-5', '{"userId": "u5", "chan');

  // Wait until all six have a final outcome and the queue is drained (the flaky one comes back after its backoff).
  const finals = () => (counts.processed ?? 0) + (counts.duplicate ?? 0) + (counts['dead-letter'] ?? 0);
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (Date.now() > deadline) {
      console.error(`demo did not settle within 60 s: ${JSON.stringify(counts)}`);
      process.exitCode = 1;
      break;
    }
    if (finals() < 6) {
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    const { Attributes = {} } = await client.send(
      new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
    );
    if (Number(Attributes.ApproximateNumberOfMessages) + Number(Attributes.ApproximateNumberOfMessagesNotVisible) === 0) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const rows = await db
    .select()
    .from(notificationsSent)
    .where(sql`${notificationsSent.messageId} like ${`${runId}-%`}`);
  const summary = ['processed', 'duplicate', 'retry', 'dead-letter'].map((k) => `${k}=${counts[k] ?? 0}`).join(' ');
  console.log(`\n${summary}; notifications_sent rows for this run: ${rows.length} (expected 3: welcome once, reset, flaky after one retry)`);
  await shutdown();
}
