import { InboxErrorCodes, migrate, withInbox, withInboxBatch, type InboxError, type InboxMessage } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, uniqueName, waitFor, type TestDatabase } from '@inboxed/test-support';
import { drizzle } from 'drizzle-orm/node-postgres';
import type { Kafka } from 'kafkajs';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { brokerOptions, committedOffsets, createTopic, produce, readTopic, testKafka } from '../test/kafka-test-kit.js';
import { createEachBatchHandler, createKafkaConsumer, type KafkaConsumerOptions, type KafkaInboxConsumer } from './index.js';

describe('createKafkaConsumer against a Kafka-protocol broker', () => {
  let t: TestDatabase;
  let kafka: Kafka;
  let topic: string;
  let groupId: string;
  const running: KafkaInboxConsumer[] = [];

  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { poolSize: 10 });
    await migrate(t.db, { schema: t.schema });
    kafka = testKafka();
    topic = uniqueName('payments');
    groupId = uniqueName('group');
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((c) => c.stop()));
    await t.close();
  });

  const insertEffect = async (message: InboxMessage, tx: any) => {
    await tx.insert(t.effects).values({ messageId: message.id, value: message.payload });
  };

  async function start(handler: KafkaConsumerOptions['handler'], extra: Partial<KafkaConsumerOptions> = {}): Promise<KafkaInboxConsumer> {
    const consumer = createKafkaConsumer({ kafka, groupId, topics: [topic], handler, ...brokerOptions(), ...extra });
    running.push(consumer);
    await consumer.start();
    return consumer;
  }

  it('a record produced three times with one message id has one effect; offsets are committed past all three', async () => {
    await createTopic(kafka, topic, 1);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(withInbox(insertEffect, { db: t.db, consumer: 'billing', tables: { schema: t.schema } }));
    await produce(
      kafka,
      topic,
      [1, 2, 3].map(() => ({ id: 'pay-1', value: { amount: 10 } })),
    );
    await start(processor);

    const outcomes = await recorder.waitForCount(3);
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'duplicate', 'duplicate']);
    expect(await t.countEffects('pay-1')).toBe(1);
    await waitFor('offset 3 committed', async () => (await committedOffsets(kafka, groupId, topic))[0] === 3);
  });

  it('batch mode: one effect per message id across a pre-filled topic, offsets committed to the end', async () => {
    await createTopic(kafka, topic, 2);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInboxBatch(
        async (messages: InboxMessage[], tx: any) => {
          await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
        },
        { db: t.db, consumer: 'billing', tables: { schema: t.schema } },
      ),
    );
    const records = Array.from({ length: 60 }, (_, i) => ({ id: `pay-${i % 40}`, value: { n: i % 40 }, partition: i % 2 }));
    await produce(kafka, topic, records);
    await start(processor, { batchSize: 7 });

    await recorder.waitForCount(60);
    expect(await t.countEffects()).toBe(40);
    const counts = recorder.counts();
    expect(counts.processed).toBe(40);
    expect(counts.duplicate).toBe(20);
    await waitFor('offsets committed to the end', async () => {
      const committed = await committedOffsets(kafka, groupId, topic);
      return committed[0] === 30 && committed[1] === 30;
    });
  });

  it('a record without a message id falls back to topic/partition/offset', async () => {
    await createTopic(kafka, topic, 1);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(withInbox(insertEffect, { db: t.db, consumer: 'billing', tables: { schema: t.schema } }));
    await produce(kafka, topic, [{ value: { a: 1 } }]);
    await start(processor);
    const outcome = await recorder.waitFor(`${topic}/0/0`, { status: 'processed' });
    expect(outcome.messageId).toBe(`${topic}/0/0`);
    expect(await t.countEffects(`${topic}/0/0`)).toBe(1);
  });

  it('an unparseable JSON value is dead-lettered with the parse error and committed past', async () => {
    await createTopic(kafka, topic, 1);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(withInbox(insertEffect, { db: t.db, consumer: 'billing', tables: { schema: t.schema } }));
    const deadLetters: string[] = [];
    await produce(kafka, topic, [
      { id: 'bad-1', value: '{not json' },
      { id: 'good-1', value: { ok: true } },
    ]);
    const consumer = await start(processor);
    consumer.on('dead_letter', (outcome, destination) => deadLetters.push(`${outcome.messageId}->${destination}`));

    await recorder.waitFor('good-1', { status: 'processed' });
    await waitFor('offset 2 committed', async () => (await committedOffsets(kafka, groupId, topic))[0] === 2);
    expect(deadLetters).toEqual([`bad-1->${topic}.dlq`]);
    expect(await t.countEffects()).toBe(1);
    const [dead] = await readTopic(kafka, `${topic}.dlq`, 1);
    expect(dead!.value!.toString()).toBe('{not json');
    expect(dead!.headerText).toMatchObject({
      'x-inboxed-reason': 'unparseable-body',
      'x-inboxed-error-code': 'UNPARSEABLE_BODY',
      'x-inboxed-message-id': 'bad-1',
      'x-inboxed-consumer': 'billing',
      'x-inboxed-original-topic': topic,
      'x-inboxed-original-partition': '0',
      'x-inboxed-original-offset': '0',
      'message-id': 'bad-1',
    });
    expect(dead!.headerText['x-inboxed-error']).toMatch(/not valid JSON/);
  });

  describe('stop()', () => {
    async function stallingConsumer(stopTimeoutMs: number) {
      await createTopic(kafka, topic, 1);
      await produce(
        kafka,
        topic,
        Array.from({ length: 5 }, (_, i) => ({ id: `pay-${i}`, value: { n: i } })),
      );
      let release: () => void = () => {};
      const released = new Promise<void>((resolve) => (release = resolve));
      let entered: () => void = () => {};
      const inHandler = new Promise<void>((resolve) => (entered = resolve));
      const processor = withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(t.effects).values({ messageId: message.id });
          if (message.id === 'pay-2') {
            entered();
            await released;
          }
        },
        { db: t.db, consumer: 'billing', tables: { schema: t.schema } },
      );
      const errors: string[] = [];
      const consumer = await start(processor, { stopTimeoutMs });
      consumer.on('error', (error) => errors.push(String(error.code)));
      await inHandler;
      return { consumer, release, errors };
    }

    const applied = async () => (await t.query<{ message_id: string }>(`select message_id from "${t.schema}".effects order by id`)).map((r) => r.message_id);

    it('finishes the record in flight, commits it, and takes no further records', async () => {
      const { consumer, release, errors } = await stallingConsumer(30_000);
      const stopping = consumer.stop();
      release();
      await stopping;
      expect(await applied()).toEqual(['pay-0', 'pay-1', 'pay-2']);
      expect(await committedOffsets(kafka, groupId, topic)).toEqual({ 0: 3 });
      expect(errors).toEqual([]);
    });

    it('abandons work still running after stopTimeoutMs without committing its offset', async () => {
      const { consumer, release, errors } = await stallingConsumer(200);
      await consumer.stop();
      expect(errors).toEqual(['KAFKA_STOP_TIMEOUT']);
      release();
      // The abandoned record's transaction may still commit, but its offset never does: a later
      // member replays it as a duplicate.
      await waitFor('pay-2 applied', async () => (await t.countEffects('pay-2')) === 1);
      expect(await committedOffsets(kafka, groupId, topic)).toEqual({ 0: 2 });
      expect(await applied()).toEqual(['pay-0', 'pay-1', 'pay-2']);
    });
  });

  it('low-level eachBatch handler on your own consumer.run: one effect per id, DLQ for poison, offsets to the end', async () => {
    await createTopic(kafka, topic, 1);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInboxBatch(
        async (messages: InboxMessage[], tx: any) => {
          await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
        },
        { db: t.db, consumer: 'billing', tables: { schema: t.schema } },
      ),
    );
    await produce(kafka, topic, [
      { id: 'pay-1', value: { n: 1 } },
      { id: 'pay-2', value: '{broken' },
      { id: 'pay-1', value: { n: 1 } },
      { id: 'pay-3', value: { n: 3 } },
    ]);
    const { consumerConfig, idempotentDeadLetters } = brokerOptions();
    const consumer = kafka.consumer({ groupId, ...consumerConfig });
    const producer = kafka.producer({ idempotent: idempotentDeadLetters, maxInFlightRequests: 1 });
    await producer.connect();
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    const eachBatch = createEachBatchHandler(processor, { consumer, producer, groupId });
    const dead: string[] = [];
    eachBatch.on('dead_letter', (outcome, destination) => dead.push(`${outcome.messageId}:${destination}`));
    try {
      await consumer.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch });
      await recorder.waitFor('pay-3', { status: 'processed' });
      await waitFor('offset 4 committed', async () => (await committedOffsets(kafka, groupId, topic))[0] === 4);
      expect(dead).toEqual([`pay-2:${topic}.dlq`]);
      expect(await t.countEffects()).toBe(2);
      expect(recorder.outcomes.map((o) => `${o.messageId}:${o.status}`)).toEqual(['pay-1:processed', 'pay-1:duplicate', 'pay-3:processed']);
    } finally {
      expect(await eachBatch.drain()).toBe(0);
      await consumer.disconnect();
      eachBatch.close();
      await producer.disconnect();
    }
  });
});

describe('createKafkaConsumer: misconfiguration is loud', () => {
  it('start() rejects with INBOX_TABLE_MISSING when the inbox tables were never migrated, and consumes nothing', async () => {
    const t = await createTestDatabase('node-postgres');
    const kafka = testKafka();
    const topic = uniqueName('unmigrated');
    const groupId = uniqueName('group');
    try {
      await createTopic(kafka, topic, 1);
      await produce(kafka, topic, [{ id: 'm-1', value: {} }]);
      const consumer = createKafkaConsumer({
        kafka,
        groupId,
        topics: [topic],
        ...brokerOptions(),
        handler: withInbox(async () => {}, { db: t.db, consumer: 'billing', tables: { schema: t.schema } }),
      });
      await expect(consumer.start()).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING });
      await consumer.stop();
      expect(await committedOffsets(kafka, groupId, topic)).toEqual({ 0: -1 }); // nothing committed
    } finally {
      await t.close();
    }
  });

  it('start() with the database unreachable reports DATABASE_UNAVAILABLE as an error event and starts anyway', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMillis: 500 });
    const kafka = testKafka();
    const topic = uniqueName('db-down');
    await createTopic(kafka, topic, 1);
    const consumer = createKafkaConsumer({
      kafka,
      groupId: uniqueName('group'),
      topics: [topic],
      ...brokerOptions(),
      handler: withInbox(async () => {}, { db: drizzle(pool), consumer: 'billing' }),
    });
    const errors: InboxError[] = [];
    consumer.on('error', (error) => errors.push(error));
    try {
      await consumer.start();
      expect(errors.map((e) => e.code)).toEqual([InboxErrorCodes.DATABASE_UNAVAILABLE]);
    } finally {
      await consumer.stop();
      await pool.end();
    }
  });
});
