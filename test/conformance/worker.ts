// The one worker process of the crash tests and the soak, for every broker: it consumes the test's
// destination with the broker's adapter (packages/<BROKER>/test/harness.ts) and a withInbox
// processor that writes one `effects` row per message, and reports on stdout, one line each:
//   ready                  consuming
//   settling <status> <id> an outcome is final (committed) and about to be settled with the broker
// WORK_MS makes each handler call take that much longer (the soak's stand-in for real work); `a-b`
// picks a time from a to b for each call.
// With CRASH=after-commit it SIGKILLs itself at the first `settling processed`: the effect
// committed, the broker never heard of it. Otherwise it runs until killed or SIGTERMed.
//
// MODE=leased (with PROVIDER_URL and LEASE_MS) runs a leased-mode processor that charges the fake
// payment provider (test/support/fake-payment-provider.ts) under the context's idempotency key,
// outside any transaction, and writes the `effects` row with the fenced completion. After a
// takeover it first asks the provider whether the previous owner's charge got through. It adds:
//   handling <id> token=<n> takeover=<bool> key=<idempotency key>   the handler starts
//   charging <id> key=<key>                                         it is about to call POST /charges
//   found <id> charge=<charge id>                                   a takeover found the earlier charge
//   fenced <id> token=<n>                                           the handler returned, the fence refused its completion
// STALL_SHARE (0 to 1) makes that share of handler calls pause for 1.5 x LEASE_MS after the charge
// without looking at their signal (a GC pause, a stuck disk): the lease runs out under them.
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type AnyInboxProcessor, type InboxMessage, type InboxOutcome, storeResult, withInbox, withInboxBatch } from '@inboxed/core';
import { createCharge, findCharge } from '@inboxed/test-support/fake-payment-provider';
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
const [workMin, workMax = workMin] = (process.env.WORK_MS ?? '0').split('-').map(Number) as [number, number?];
const workTime = () => workMin + Math.random() * (workMax - workMin);
const say = (line: string) => void process.stdout.write(`${line}\n`);
const insert = async (messages: InboxMessage[], tx: any, work = true) => {
  if (work && workMax > 0) await sleep(workTime());
  await tx.execute(sql`insert into ${sql.raw(`"${schema}"`)}.effects (message_id) select unnest(${sql.param(messages.map((m) => m.id))}::text[])`);
};

/** Handler calls that returned normally, as `<id> <token>`: a `retry` with LEASE_LOST for one of them is a refused (fenced) completion. */
const returned = new Set<string>();

function leasedProcessor(): AnyInboxProcessor {
  const providerUrl = env('PROVIDER_URL');
  const leaseMs = Number(env('LEASE_MS'));
  const stallShare = Number(process.env.STALL_SHARE ?? 0);
  return withInbox<typeof db, { n: number }>(
    async (message, context) => {
      const { idempotencyKey: key, fencingToken: token, takeover, signal } = context;
      say(`handling ${message.id} token=${token} takeover=${takeover} key=${key}`);
      // A takeover: the previous owner may have charged before it died. Ask before charging again
      // (the key would make a second POST harmless too; asking first is what a careful handler does).
      let charge = takeover ? await findCharge(providerUrl, key, signal) : undefined;
      if (charge === undefined) {
        say(`charging ${message.id} key=${key}`);
        charge = (await createCharge(providerUrl, key, { amountCents: 100 + message.payload.n, reference: message.id }, signal)).charge;
      } else {
        say(`found ${message.id} charge=${charge.id}`);
      }
      await sleep(workTime()); // local work after the call; it does not watch the signal
      if (Math.random() < stallShare) await sleep(1.5 * leaseMs);
      context.complete((tx: any) => insert([message], tx, false));
      returned.add(`${message.id} ${token}`);
      return storeResult({ chargeId: charge.id });
    },
    { ...options, mode: 'leased', leaseMs },
  );
}

const handler =
  process.env.MODE === 'leased'
    ? leasedProcessor()
    : process.env.MODE === 'batch'
      ? withInboxBatch(async (messages, tx) => insert(messages, tx), options)
      : withInbox(async (message, tx) => insert([message], tx), options);

const crash = process.env.CRASH === 'after-commit';
const consumer = harness.createWorkerConsumer(process.env, handler, (outcome: InboxOutcome) => {
  process.stdout.write(`settling ${outcome.status} ${outcome.messageId}\n`);
  if (outcome.status === 'retry' && outcome.error?.code === 'LEASE_LOST' && returned.has(`${outcome.messageId} ${outcome.fencingToken}`)) {
    say(`fenced ${outcome.messageId} token=${outcome.fencingToken}`);
  }
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
