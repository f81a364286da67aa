import { InboxErrorCodes, withInbox, withInboxBatch, type InboxError, type InboxMessage } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, waitFor } from '@inboxed/test-support';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { useKafkaTestKit } from '../test/kafka-test-kit.js';
import { createHarness, GROUP_TIMINGS, type KafkaHarness } from '../test/harness.js';
import { createEachBatchHandler, createKafkaConsumer } from './index.js';
import { headerString } from './kafka-message.js';

describe('createKafkaConsumer against a Kafka-protocol broker', () => {
  const k = useKafkaTestKit({ partitions: 2 });

  it('a batch processor gets at most batchSize records per call, one transaction and one commit each, offsets committed to the end', async () => {
    const sizes: number[] = [];
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInboxBatch(
        async (messages: InboxMessage[], tx: any) => {
          sizes.push(messages.length);
          await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
      ),
    );
    await k.h.produce(Array.from({ length: 60 }, (_, i) => ({ id: `pay-${i % 40}`, value: { n: i % 40 }, partition: i % 2 })));
    await k.start(processor, { batchSize: 7 });

    await recorder.waitForCount(60);
    expect(await k.t.countEffects()).toBe(40);
    expect(recorder.counts()).toEqual({ processed: 40, duplicate: 20 });
    expect(Math.max(...sizes)).toBeLessThanOrEqual(7);
    await waitFor('offsets committed to the end', async () => {
      const committed = await k.h.committed();
      return committed[0] === 30 && committed[1] === 30;
    });
  });

  it('messageId.extract and messageId.fallback: the extractor wins, the record identity only when asked for', async () => {
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(withInbox(async () => {}, { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } }));
    await k.h.produce([
      { key: 'key-1', value: { a: 1 }, partition: 0 },
      { value: { a: 2 }, partition: 0 },
    ]);
    await k.start(processor, { messageId: { extract: ({ message }) => message.key?.toString(), fallback: true } });
    await recorder.waitFor('key-1', { status: 'processed' });
    await recorder.waitFor(`${k.h.topic}/0/1`, { status: 'processed' });
  });

  it('headers reach the handler and the dead-letter copy as sent, one named __proto__ too (kafkajs decodes it as [prototype, value])', async () => {
    const seen: Record<string, unknown>[] = [];
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(
        async (message: InboxMessage) => {
          seen.push(message.headers ?? {});
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
      ),
    );
    // An own `__proto__` key, as a producer in any language can send it.
    const headers = (proto: string) => JSON.parse(`{"__proto__": "${proto}", "trace": "t-1"}`) as Record<string, string>;
    await k.h.produce([
      { id: 'pay-1', value: { a: 1 }, partition: 0, headers: headers('p-1') },
      { id: 'pay-2', value: 'not json', partition: 0, headers: headers('p-2') },
    ]);
    await k.start(processor);
    await recorder.waitFor('pay-1', { status: 'processed' });
    await recorder.waitFor('pay-2', { status: 'dead-letter' });

    expect(Object.getOwnPropertyDescriptor(seen[0], '__proto__')?.value).toBe('p-1');
    expect(Object.getPrototypeOf(seen[0])).toBe(Object.prototype);
    expect(seen[0]).toMatchObject({ trace: 't-1', 'message-id': 'pay-1' });
    // The outcome is recorded before the copy is produced: wait for the copy itself.
    await waitFor('the dead-letter copy', async () => (await k.h.deadLetterRecords()).length === 1);
    const [copy] = await k.h.deadLetterRecords();
    expect(headerString(Object.getOwnPropertyDescriptor(copy!.headers, '__proto__')?.value)).toBe('p-2');
    expect(headerString(copy!.headers?.trace)).toBe('t-1');
  });

  describe('stop()', () => {
    async function stallingConsumer(stopTimeoutMs: number) {
      await k.h.produce(Array.from({ length: 5 }, (_, i) => ({ id: `pay-${i}`, value: { n: i }, partition: 0 })));
      let release: () => void = () => {};
      const released = new Promise<void>((resolve) => (release = resolve));
      let entered: () => void = () => {};
      const inHandler = new Promise<void>((resolve) => (entered = resolve));
      const processor = withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(k.t.effects).values({ messageId: message.id });
          if (message.id === 'pay-2') {
            entered();
            await released;
          }
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
      );
      const errors: string[] = [];
      const consumer = await k.start(processor, { stopTimeoutMs });
      consumer.on('error', (error) => errors.push(String(error.code)));
      await inHandler;
      return { consumer, release, errors };
    }

    it('finishes the record in flight, commits it, and takes no further records', async () => {
      const { consumer, release, errors } = await stallingConsumer(30_000);
      const stopping = consumer.stop();
      await waitFor('stopping', () => consumer.status().state === 'stopping');
      expect(consumer.status()).toMatchObject({ consuming: false, inFlight: 1 });
      release();
      await stopping;
      expect(await k.applied()).toEqual(['pay-0', 'pay-1', 'pay-2']);
      expect(await k.h.committed()).toEqual({ 0: 3, 1: -1 });
      expect(errors).toEqual([]);
    });

    it('abandons work still running after stopTimeoutMs (STOP_TIMEOUT) without committing its offset', async () => {
      const { consumer, release, errors } = await stallingConsumer(200);
      await consumer.stop();
      expect(errors).toEqual([InboxErrorCodes.STOP_TIMEOUT]);
      release();
      // The abandoned record's transaction may still commit, but its offset never does: a later
      // member replays it as a duplicate.
      await waitFor('pay-2 applied', async () => (await k.t.countEffects('pay-2')) === 1);
      expect(await k.h.committed()).toEqual({ 0: 2, 1: -1 });
      expect(await k.applied()).toEqual(['pay-0', 'pay-1', 'pay-2']);
    });
  });

  it('status(): connected and consuming while in the group; not consuming while every partition is held for a retry', async () => {
    let fail = true;
    const processor = withInbox(
      async () => {
        if (fail) throw new Error('ledger down');
      },
      { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema }, backoff: { baseDelayMs: 60_000, maxDelayMs: 60_000, jitter: 'none' } },
    );
    const consumer = createKafkaConsumer({ ...k.h.options(processor), topics: [k.h.topic] });
    k.track(consumer);
    consumer.on('error', () => {});
    await consumer.start();
    expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true, inFlight: 0 });
    await k.h.produce([
      { id: 'held-0', value: {}, partition: 0 },
      { id: 'held-1', value: {}, partition: 1 },
    ]);
    await waitFor('both partitions held', () => !consumer.status().consuming);
    expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: false });
    fail = false;
    await consumer.stop();
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false });
  });

  it('low-level eachBatch handler on your own consumer.run: one effect per id, dead-letter for poison, offsets to the end', async () => {
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInboxBatch(
        async (messages: InboxMessage[], tx: any) => {
          await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id })));
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
      ),
    );
    await k.h.produce([
      { id: 'pay-1', value: { n: 1 }, partition: 0 },
      { id: 'pay-2', value: '{broken', partition: 0 },
      { id: 'pay-1', value: { n: 1 }, partition: 0 },
      { id: 'pay-3', value: { n: 3 }, partition: 0 },
    ]);
    const consumer = k.h.kafka.consumer({ groupId: k.h.groupId, ...GROUP_TIMINGS });
    const producer = k.h.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    await consumer.connect();
    await consumer.subscribe({ topics: [k.h.topic], fromBeginning: true });
    const eachBatch = createEachBatchHandler(processor, { consumer, producer, groupId: k.h.groupId });
    const dead: string[] = [];
    eachBatch.on('dead_letter', (outcome, destination) => dead.push(`${outcome.messageId}:${destination}`));
    try {
      await consumer.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch });
      await recorder.waitFor('pay-3', { status: 'processed' });
      await waitFor('offset 4 committed', async () => (await k.h.committed())[0] === 4);
      expect(dead).toEqual([`pay-2:${k.h.deadLetterTopic}`]);
      expect(await k.t.countEffects()).toBe(2);
      // The adapter's own outcome (pay-2's unparseable value) reaches the processor's observers too.
      expect(recorder.outcomes.map((o) => `${o.messageId}:${o.status}`).sort()).toEqual([
        'pay-1:duplicate',
        'pay-1:processed',
        'pay-2:dead-letter',
        'pay-3:processed',
      ]);
    } finally {
      expect(await eachBatch.drain()).toBe(0);
      await consumer.disconnect();
      eachBatch.close();
      await producer.disconnect();
    }
  });
});

describe('createKafkaConsumer: misconfiguration is loud', () => {
  let h: KafkaHarness;
  beforeEach(async () => {
    h = createHarness({ partitions: 1 });
    await h.setup();
  });
  afterEach(async () => {
    await h.teardown();
  });

  it('start() rejects with INBOX_TABLE_MISSING when the inbox tables were never migrated, and consumes nothing', async () => {
    const t = await createTestDatabase('node-postgres');
    try {
      await h.publish([{ id: 'm-1', payload: {} }]);
      const consumer = createKafkaConsumer(h.options(withInbox(async () => {}, { db: t.db, consumer: 'billing', tables: { schema: t.schema } })));
      await expect(consumer.start()).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING });
      expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false });
      await consumer.stop();
      expect(await h.committed()).toEqual({ 0: -1 }); // nothing committed
    } finally {
      await t.close();
    }
  });

  it('start() with the database unreachable reports DATABASE_UNAVAILABLE as an error event and starts anyway', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMillis: 500 });
    const consumer = createKafkaConsumer(h.options(withInbox(async () => {}, { db: drizzle(pool), consumer: 'billing' })));
    const errors: InboxError[] = [];
    consumer.on('error', (error) => errors.push(error));
    try {
      await consumer.start();
      expect(errors.map((e) => e.code)).toEqual([InboxErrorCodes.DATABASE_UNAVAILABLE]);
      expect(consumer.status()).toMatchObject({ state: 'running', connected: true });
    } finally {
      await consumer.stop();
      await pool.end();
    }
  });

  it('options are checked when the consumer is created', () => {
    const handler = withInbox(async () => {}, { db: drizzle(new pg.Pool()), consumer: 'billing' });
    expect(() => createKafkaConsumer({ ...h.options(handler), groupId: '' })).toThrow(/groupId/);
    expect(() => createKafkaConsumer({ ...h.options(handler), topics: [] })).toThrow(/topics/);
    expect(() => createKafkaConsumer({ ...h.options(handler), batchSize: 0 })).toThrow(/batchSize/);
    expect(() => createKafkaConsumer({ ...h.options(handler), handler: (async () => {}) as never })).toThrow(/processor/);
  });
});
