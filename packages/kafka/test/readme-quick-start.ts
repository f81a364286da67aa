// The README's quick start, verbatim: `tsc -p tsconfig.json` type-checks it so the snippet cannot rot.
// (Not executed by the tests: it needs a long-running broker and listens for SIGTERM.)
import { migrate, withInbox } from '@inboxed/core';
import { createKafkaConsumer } from '@inboxed/kafka';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { Kafka } from 'kafkajs';
import pg from 'pg';

const ledger = pgTable('ledger_entries', { paymentId: text('payment_id').primaryKey(), amountCents: integer('amount_cents').notNull() });
const db = drizzle(new pg.Pool({ connectionString: process.env.DATABASE_URL }));
await migrate(db); // public.inbox, public.inbox_attempts

const bookPayment = withInbox(async (message, tx) => {
  const { amountCents } = message.payload as { amountCents: number };
  await tx.insert(ledger).values({ paymentId: message.id, amountCents }); // commits with the inbox row
}, { db, consumer: 'ledger.payments' });

const consumer = createKafkaConsumer({
  kafka: new Kafka({ clientId: 'ledger', brokers: ['localhost:9092'] }),
  groupId: 'ledger',
  topics: ['payments'],
  handler: bookPayment,
});
consumer.on('dead_letter', (outcome, topic) => console.warn(`${outcome.messageId} -> ${topic}: ${outcome.reason}`));
consumer.on('error', (error) => console.error(error.code, error.message));
await consumer.start();
process.once('SIGTERM', () => void consumer.stop());
