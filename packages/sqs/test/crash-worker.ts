/**
 * A consumer process for the crash test: processes messages with the inbox and, after the effect
 * has committed but before the SQS delete, prints `COMMITTED <id>` and hangs, so the parent can
 * SIGKILL it exactly in the window between commit and delete.
 *
 * Env: SQS_ENDPOINT, QUEUE_URL, DATABASE_URL, SCHEMA.
 */
import { SQSClient } from '@aws-sdk/client-sqs';
import { withInbox, type InboxMessage } from '@inboxed/core';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { createSqsConsumer } from '../src/index.js';

const env = (name: string) =>
  process.env[name] ??
  (() => {
    throw new Error(`${name} is required`);
  })();
const schema = env('SCHEMA');
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 2 });
const db = drizzle(pool);
const client = new SQSClient({ endpoint: env('SQS_ENDPOINT'), region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });

const processor = withInbox(
  async (message: InboxMessage, tx) => {
    await tx.execute(sql`insert into ${sql.identifier(schema)}.effects (message_id) values (${message.id})`);
  },
  { db, consumer: 'notifications', tables: { schema } },
);
// Between the processor's commit and the adapter's delete: announce, then never return.
const crashAfterCommit = Object.assign(
  async (message: InboxMessage) => {
    const outcome = await processor(message);
    if (outcome.status === 'processed') {
      process.stdout.write(`COMMITTED ${outcome.messageId}\n`);
      await new Promise(() => {});
    }
    return outcome;
  },
  { kind: 'single' as const, consumer: processor.consumer, checkTables: () => processor.checkTables() },
);

const consumer = createSqsConsumer({ client, queueUrl: env('QUEUE_URL'), handler: crashAfterCommit, waitTimeSeconds: 1, visibilityTimeoutSeconds: 2 });
consumer.on('error', (error) => process.stderr.write(`${error.code}: ${error.message}\n`));
await consumer.start();
process.stdout.write('READY\n');
