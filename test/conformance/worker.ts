// The one worker process of the crash tests and the soak, for every broker: it consumes the test's
// destination with the broker's adapter (packages/<BROKER>/test/harness.ts) and a withInbox
// processor that writes one `effects` row per message, and reports on stdout, one line each:
//   ready                  consuming
//   settling <status> <id> an outcome is final (committed) and about to be settled with the broker
// WORK_MS makes each handler call take that much longer (the soak's stand-in for real work).
// With CRASH=after-commit it SIGKILLs itself at the first `settling processed`: the effect
// committed, the broker never heard of it. Otherwise it runs until killed or SIGTERMed.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { withInbox, withInboxBatch, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import type { HarnessModule } from './harness.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`worker: ${name} is not set`);
  return value;
};

const broker = env('BROKER');
const schema = env('SCHEMA');
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const harness = (await import(pathToFileURL(path.join(root, 'packages', broker, 'test', 'harness.ts')).href)) as HarnessModule;

const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 8 });
pool.on('error', () => {}); // connections die with the database or this process; outcomes say so
const db = drizzle(pool);
const options = { db, consumer: env('CONSUMER_NAME'), tables: { schema }, backoff: { baseDelayMs: 100, maxDelayMs: 1000 }, maxAttempts: 20 };
const workMs = Number(process.env.WORK_MS ?? 0);
const insert = async (messages: InboxMessage[], tx: any) => {
  if (workMs > 0) await new Promise((resolve) => setTimeout(resolve, workMs));
  await tx.execute(sql`insert into ${sql.raw(`"${schema}"`)}.effects (message_id) select unnest(${sql.param(messages.map((m) => m.id))}::text[])`);
};
const handler =
  process.env.MODE === 'batch'
    ? withInboxBatch(async (messages, tx) => insert(messages, tx), options)
    : withInbox(async (message, tx) => insert([message], tx), options);

const crash = process.env.CRASH === 'after-commit';
const consumer = harness.createWorkerConsumer(process.env, handler, (outcome: InboxOutcome) => {
  process.stdout.write(`settling ${outcome.status} ${outcome.messageId}\n`);
  if (crash && outcome.status === 'processed') process.kill(process.pid, 'SIGKILL');
});
consumer.on('error', (error) => process.stderr.write(`error ${error.code} ${error.message}\n`));
await consumer.start();
process.stdout.write('ready\n');
process.once('SIGTERM', () => {
  void consumer.stop().then(async () => {
    await pool.end();
    process.exit(0);
  });
});
