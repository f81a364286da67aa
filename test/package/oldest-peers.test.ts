import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { databaseUrl, requireService, uniqueName } from '@inboxed/test-support';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type {} from '../support/amqp-setup.js';
import type {} from '../support/kafka-setup.js';
import type {} from '../support/sqs-setup.js';
import { mustRun, repoRoot, runCommand, transcript } from './support.js';

// The lower end of every peer range the packages declare, proven the way a user would meet it: the
// tarballs installed next to the OLDEST versions the README's "Supported versions" table claims,
// type-checked against their types, then real traffic through PostgreSQL, RabbitMQ, SQS and Kafka.
const OLDEST = {
  'drizzle-orm': '0.44.0',
  amqplib: '0.10.0',
  '@types/amqplib': '0.10.8',
  // The first release speaking SQS's JSON protocol: older ones use the Query protocol, which the emulator (fauxqs) does not implement.
  '@aws-sdk/client-sqs': '3.447.0',
  kafkajs: '2.2.0',
  pg: '8.11.0',
  '@types/pg': '8.11.0',
  // NoInfer (in the published types) needs TypeScript 5.4.
  typescript: '5.4.5',
};

const APP = `import { SQSClient, CreateQueueCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { createAmqpConsumer } from '@inboxed/amqp';
import { createKafkaConsumer } from '@inboxed/kafka';
import { migrate, withInbox, type InboxOutcome } from '@inboxed/core';
import { createSqsConsumer } from '@inboxed/sqs';
import amqp from 'amqplib';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';

const env = (name: string) => process.env[name] ?? '';
const pool = new pg.Pool({ connectionString: env('DATABASE_URL') });
const db = drizzle(pool);
await migrate(db, { schema: env('SCHEMA') });
const seen: Record<string, string[]> = { direct: [], amqp: [], sqs: [], kafka: [] };
const processor = (consumer: string) =>
  withInbox(async () => {}, { db, consumer, tables: { schema: env('SCHEMA') } });
const record = (where: string) => (outcome: InboxOutcome) => void seen[where]!.push(outcome.status);

// drizzle-orm and pg, directly.
const direct = processor('direct');
for (let i = 0; i < 2; i++) record('direct')(await direct({ id: 'm-1', payload: { a: 1 } }));

// amqplib: the consumer declares the queue; two copies of one message.
const amqpConsumer = createAmqpConsumer({ url: env('AMQP_URL'), queue: env('QUEUE'), queueOptions: { durable: true, autoDelete: true }, handler: processor('amqp') });
amqpConsumer.on('message_processed', record('amqp'));
amqpConsumer.on('duplicate', record('amqp'));
await amqpConsumer.start();
const connection = await amqp.connect(env('AMQP_URL'));
const channel = await connection.createConfirmChannel();
for (let i = 0; i < 2; i++) channel.sendToQueue(env('QUEUE'), Buffer.from('{"a":1}'), { messageId: 'm-1', contentType: 'application/json' });
await channel.waitForConfirms();
await connection.close();

// The AWS SDK: two copies of one message through the emulator.
const sqs = new SQSClient({ endpoint: env('SQS_ENDPOINT'), region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: env('QUEUE') }));
const sqsConsumer = createSqsConsumer({ client: sqs, queueUrl: QueueUrl!, waitTimeSeconds: 1, handler: processor('sqs') });
sqsConsumer.on('message_processed', record('sqs'));
sqsConsumer.on('duplicate', record('sqs'));
sqsConsumer.on('error', () => {}); // no dead-letter target configured: reported once, not needed here
await sqsConsumer.start();
for (let i = 0; i < 2; i++) {
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: '{"a":1}', MessageAttributes: { 'message-id': { DataType: 'String', StringValue: 'm-1' } } }));
}

// kafkajs: two copies of one record; the topic is created by the first produce.
const kafka = new Kafka({ clientId: 'oldest', brokers: env('KAFKA_BROKERS').split(','), logLevel: logLevel.NOTHING });
const producer = kafka.producer({ allowAutoTopicCreation: true });
await producer.connect();
await producer.send({ topic: env('QUEUE'), acks: -1, messages: [1, 2].map(() => ({ value: '{"a":1}', headers: { 'message-id': 'm-1' } })) });
await producer.disconnect();
const kafkaConsumer = createKafkaConsumer({ kafka, groupId: env('QUEUE'), topics: [env('QUEUE')], handler: processor('kafka'), consumerConfig: { sessionTimeout: 6000, heartbeatInterval: 500 } });
kafkaConsumer.on('message_processed', record('kafka'));
kafkaConsumer.on('duplicate', record('kafka'));
await kafkaConsumer.start();

const deadline = Date.now() + 45_000;
const done = () => ['amqp', 'sqs', 'kafka'].every((where) => seen[where]!.length >= 2);
while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
await amqpConsumer.stop();
await sqsConsumer.stop();
await kafkaConsumer.stop();
await pool.end();
console.log(JSON.stringify(seen));
`;

/**
 * Every public entry point, type-only: checked with `skipLibCheck: false` below, so a declaration
 * file that names something the build stripped (`@internal`) shows up as the user with that
 * setting would see it.
 */
const ENTRIES = `export type * as core from '@inboxed/core';
export type * as schema from '@inboxed/core/schema';
export type * as adapter from '@inboxed/core/adapter';
export type * as testing from '@inboxed/core/testing';
export type * as admin from '@inboxed/core/admin';
export type * as amqp from '@inboxed/amqp';
export type * as kafka from '@inboxed/kafka';
export type * as sqs from '@inboxed/sqs';
export type * as cli from '@inboxed/cli';
`;

let app: string;
let admin: pg.Client;
const schema = uniqueName('oldest');

beforeAll(async () => {
  app = await mkdtemp(join(tmpdir(), 'inboxed-oldest-'));
  expect(app.startsWith(repoRoot)).toBe(false);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'inboxed-oldest-peers', private: true, type: 'module' }));
  writeFileSync(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        skipLibCheck: true,
        outDir: 'dist',
        types: ['node'],
      },
      include: ['app.ts'],
    }),
  );
  writeFileSync(join(app, 'app.ts'), APP);
  writeFileSync(join(app, 'entries.ts'), ENTRIES);
  writeFileSync(
    join(app, 'tsconfig.libcheck.json'),
    JSON.stringify({ extends: './tsconfig.json', compilerOptions: { skipLibCheck: false, noEmit: true }, include: ['entries.ts'] }),
  );
  const peers = Object.entries(OLDEST).map(([name, version]) => `${name}@${version}`);
  const tarballs = Object.values(inject('tarballs'));
  await mustRun('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs, ...peers, '@types/node@^20.19.0'], {
    cwd: app,
    timeoutMs: 280_000,
  });
  await mustRun(join(app, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json'], { cwd: app });
  admin = new pg.Client({ connectionString: databaseUrl() });
  await admin.connect();
});

afterAll(async () => {
  await admin?.query(`drop schema if exists "${schema}" cascade`);
  await admin?.end();
  if (app !== undefined && process.env.KEEP_SCRATCH_APP === undefined) await rm(app, { recursive: true, force: true });
});

describe('the oldest supported peers, installed next to the tarballs', () => {
  it(`${Object.entries(OLDEST)
    .map(([n, v]) => `${n} ${v}`)
    .join(', ')}: type-check, and each message has one effect`, async () => {
    const run = await runCommand(process.execPath, ['dist/app.js'], {
      cwd: app,
      timeoutMs: 90_000,
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl(),
        SCHEMA: schema,
        AMQP_URL: requireService('amqpUrl'),
        SQS_ENDPOINT: requireService('sqsEndpoint'),
        KAFKA_BROKERS: requireService('kafkaBrokers'),
        QUEUE: uniqueName('oldest'),
      },
    });
    expect(run.code, transcript(run)).toBe(0);
    const seen = JSON.parse(run.stdout.trim().split('\n').pop()!) as Record<string, string[]>;
    for (const where of ['direct', 'amqp', 'sqs', 'kafka']) expect(seen[where], where).toEqual(['processed', 'duplicate']);
  });

  it("inboxed's own declaration files check without skipLibCheck (its peers' may not: drizzle-orm's do not)", async () => {
    const check = await runCommand(join(app, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.libcheck.json'], { cwd: app, timeoutMs: 120_000 });
    const lines = check.stdout.split('\n').filter((line) => /error TS\d+/.test(line));
    // Errors in inboxed's files, or in entries.ts itself (an entry point without types), fail it.
    expect(
      lines.filter((line) => line.includes('node_modules/@inboxed/') || !line.includes('node_modules/')),
      transcript(check),
    ).toEqual([]);
  });
});
