/**
 * A consumer in a process of its own, for crash tests: the parent SIGKILLs it (or it SIGKILLs
 * itself at a chosen point) and checks what another group member makes of the aftermath.
 *
 * env: KAFKA_BROKERS, DATABASE_URL, SCHEMA, TOPIC, GROUP_ID, CONSUMER (dedup scope),
 *      CRASH ('before-commit': SIGKILL itself after the DB commit, before the offset commit),
 *      DELAY_MS (per message, to keep work in flight), MODE ('message' | 'batch').
 * stdout: "started", "processed <id>", "crashing <id>".
 */
import { withInbox, type InboxMessage } from '@inboxed/core';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { createKafkaConsumer } from '../src/index.js';
import { GROUP_TIMINGS } from './kafka-test-timings.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};
const schema = env('SCHEMA');
const delayMs = Number(process.env.DELAY_MS ?? 0);
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 4 });
const db = drizzle(pool);

const processor = withInbox(
  async (message: InboxMessage, tx: any) => {
    await tx.execute(sql`insert into ${sql.identifier(schema)}.effects (message_id, value) values (${message.id}, ${JSON.stringify(message.payload)}::jsonb)`);
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  },
  { db, consumer: env('CONSUMER'), tables: { schema } },
);

const kafka = new Kafka({ clientId: `child-${process.pid}`, brokers: env('KAFKA_BROKERS').split(','), logLevel: logLevel.NOTHING });
const consumer = createKafkaConsumer({
  kafka,
  groupId: env('GROUP_ID'),
  topics: [env('TOPIC')],
  handler: processor,
  mode: process.env.MODE === 'batch' ? 'batch' : 'message',
  batchSize: 10,
  consumerConfig: GROUP_TIMINGS,
  beforeCommit: ({ outcomes }) => {
    for (const outcome of outcomes) process.stdout.write(`${outcome.status} ${outcome.messageId}\n`);
    if (process.env.CRASH === 'before-commit') {
      process.stdout.write(`crashing ${outcomes[0]?.messageId}\n`);
      process.kill(process.pid, 'SIGKILL');
    }
  },
});
consumer.on('error', (error) =>
  process.stderr.write(`consumer error: ${error.code} ${error.message} ${JSON.stringify(error.details)} ${(error.cause as Error | undefined)?.stack ?? ''}\n`),
);
consumer.on('reconnect', ({ attempt }) => process.stdout.write(`reconnect ${attempt}\n`));
await consumer.start();
process.stdout.write('started\n');
