/**
 * Child process for the SIGKILL test: consumes QUEUE, commits each message's effect, then prints
 * `committed <id>` and hangs before the ack, so the parent can kill it between commit and ack.
 */
import { migrate, withInbox } from '@inboxed/core';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigserial, jsonb, pgSchema, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { createAmqpConsumer } from '../src/index.js';

const env = (name: string): string =>
  process.env[name] ??
  (() => {
    throw new Error(`${name} is required`);
  })();
const [AMQP_URL, DATABASE_URL, SCHEMA, QUEUE] = ['AMQP_URL', 'DATABASE_URL', 'SCHEMA', 'QUEUE'].map(env) as [string, string, string, string];
const effects = pgSchema(SCHEMA).table('effects', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  messageId: text('message_id').notNull(),
  value: jsonb('value'),
});
const db = drizzle(new pg.Pool({ connectionString: DATABASE_URL }));
await migrate(db, { schema: SCHEMA });
const consumer = createAmqpConsumer({
  url: AMQP_URL,
  queue: QUEUE,
  retryDelaysMs: [300],
  handler: withInbox(
    async (message, tx) => {
      await tx.insert(effects).values({ messageId: message.id, value: message.payload });
    },
    { db, consumer: 'crash-consumer', tables: { schema: SCHEMA } },
  ),
  beforeAck: async (outcome) => {
    process.stdout.write(`committed ${outcome.messageId} ${outcome.status}\n`);
    await new Promise(() => {}); // never ack: the parent SIGKILLs us here
  },
});
await consumer.start();
process.stdout.write('ready\n');
