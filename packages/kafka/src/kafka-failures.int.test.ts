import { migrate, PermanentError, withInbox, withInboxBatch, type InboxMessage } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, uniqueName, waitFor, type TestDatabase } from '@inboxed/test-support';
import type { Kafka } from 'kafkajs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { brokerOptions, committedOffsets, createTopic, produce, readTopic, testKafka } from '../test/kafka-test-kit.js';
import { createKafkaConsumer, type KafkaConsumerOptions, type KafkaInboxConsumer } from './index.js';

describe('retries and dead-letters', () => {
  let t: TestDatabase;
  let kafka: Kafka;
  let topic: string;
  let groupId: string;
  const running: KafkaInboxConsumer[] = [];

  beforeEach(async () => {
    t = await createTestDatabase('node-postgres');
    await migrate(t.db, { schema: t.schema });
    kafka = testKafka();
    topic = uniqueName('payments');
    groupId = uniqueName('group');
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((c) => c.stop()));
    await t.close();
  });

  async function start(options: Pick<KafkaConsumerOptions, 'handler'> & Partial<KafkaConsumerOptions>): Promise<KafkaInboxConsumer> {
    const consumer = createKafkaConsumer({ kafka, groupId, topics: [topic], ...brokerOptions(), ...options });
    running.push(consumer);
    await consumer.start();
    return consumer;
  }

  /** Effects in the order they were applied (bigserial id). */
  const appliedOrder = async () => (await t.query<{ message_id: string }>(`select message_id from "${t.schema}".effects order by id`)).map((r) => r.message_id);

  describe.each(['message', 'batch'] as const)('in %s mode', (mode) => {
    it('a failing record holds back its partition while another partition progresses, then succeeds after retries', async () => {
      await createTopic(kafka, topic, 2);
      const slow = ['a-0', 'a-1', 'a-2'];
      const fast = ['b-0', 'b-1', 'b-2', 'b-3', 'b-4'];
      await produce(kafka, topic, [...slow.map((id) => ({ id, value: { id }, partition: 0 })), ...fast.map((id) => ({ id, value: { id }, partition: 1 }))]);
      let failures = 0;
      const recorder = createOutcomeRecorder();
      const processor = recorder.wrap(
        withInbox(
          async (message: InboxMessage, tx: any) => {
            // a-0 keeps failing until every record of the other partition is applied (and at least twice).
            if (message.id === 'a-0' && (failures < 2 || (await t.countEffects()) < fast.length)) {
              failures++;
              throw new Error('ledger unavailable');
            }
            await tx.insert(t.effects).values({ messageId: message.id });
          },
          { db: t.db, consumer: 'billing', tables: { schema: t.schema }, maxAttempts: 100, backoff: { baseDelayMs: 20, maxDelayMs: 200 } },
        ),
      );
      const retries: string[] = [];
      const consumer = await start({ handler: processor, mode });
      consumer.on('retry', (outcome) => retries.push(outcome.messageId));

      await recorder.waitFor('a-2', { status: 'processed', timeoutMs: 30_000 });
      const order = await appliedOrder();
      // Partition 0 applied strictly in offset order, and only after partition 1 went all the way through.
      expect(order.filter((id) => id.startsWith('a-'))).toEqual(slow);
      expect(order.indexOf('a-0')).toBeGreaterThan(Math.max(...fast.map((id) => order.indexOf(id))));
      expect(order).toHaveLength(slow.length + fast.length);
      // The held records were never handed to the processor before a-0 succeeded.
      const firstLater = recorder.outcomes.findIndex((o) => o.messageId === 'a-1' || o.messageId === 'a-2');
      const a0done = recorder.outcomes.findIndex((o) => o.messageId === 'a-0' && o.status === 'processed');
      expect(firstLater).toBeGreaterThan(a0done);
      expect(failures).toBeGreaterThanOrEqual(2);
      expect(retries.filter((id) => id === 'a-0').length).toBe(failures);
      await waitFor('offsets committed to the end', async () => {
        const committed = await committedOffsets(kafka, groupId, topic);
        return committed[0] === 3 && committed[1] === 5;
      });
    });
  });

  it('batch processor: a failing record stops the offset and holds later chunks of its partition until it succeeds', async () => {
    await createTopic(kafka, topic, 1);
    const ids = Array.from({ length: 10 }, (_, i) => `r-${i}`);
    await produce(
      kafka,
      topic,
      ids.map((id) => ({ id, value: { id } })),
    );
    let failures = 0;
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInboxBatch(
        async (messages: InboxMessage[], tx: any) => {
          // r-4 fails until it has failed twice on its own (core bisects a failing batch down to it).
          if (messages.some((m) => m.id === 'r-4') && failures < 2) {
            if (messages.length === 1) failures++;
            throw new Error('r-4 cannot be booked yet');
          }
          await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
        },
        { db: t.db, consumer: 'billing', tables: { schema: t.schema }, backoff: { baseDelayMs: 20, maxDelayMs: 100 } },
      ),
    );
    await start({ handler: processor, batchSize: 3 });
    await recorder.waitFor('r-9', { status: 'processed', timeoutMs: 30_000 });
    await waitFor('offset 10 committed', async () => (await committedOffsets(kafka, groupId, topic))[0] === 10);
    const order = await appliedOrder();
    expect([...order].sort()).toEqual([...ids].sort());
    // Later chunks (r-6 onwards) were applied only after the held record.
    for (const later of ids.slice(6)) expect(order.indexOf(later)).toBeGreaterThan(order.indexOf('r-4'));
    const r4 = recorder.outcomes.filter((o) => o.messageId === 'r-4').map((o) => o.status);
    expect(r4[0]).toBe('retry');
    expect(r4.at(-1)).toBe('processed');
  });

  it('a permanent failure goes to the dead-letter topic with its headers, and the offset moves past it', async () => {
    await createTopic(kafka, topic, 1);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(
        async (message: InboxMessage, tx: any) => {
          if (message.id === 'pay-bad') throw new PermanentError('card number rejected by the ledger');
          await tx.insert(t.effects).values({ messageId: message.id });
        },
        { db: t.db, consumer: 'billing', tables: { schema: t.schema } },
      ),
    );
    await produce(kafka, topic, [
      { id: 'pay-bad', value: { amount: 1 }, key: 'customer-7', headers: { 'trace-id': 'abc' } },
      { id: 'pay-good', value: { amount: 2 } },
    ]);
    const dead: string[] = [];
    const consumer = await start({ handler: processor, deadLetterTopic: `${topic}.poison` });
    consumer.on('dead_letter', (outcome, destination) => dead.push(`${outcome.messageId}:${outcome.reason}:${destination}`));

    await recorder.waitFor('pay-good', { status: 'processed' });
    await waitFor('offset 2 committed', async () => (await committedOffsets(kafka, groupId, topic))[0] === 2);
    expect(dead).toEqual([`pay-bad:permanent-failure:${topic}.poison`]);
    expect(await t.countEffects()).toBe(1);

    const [record] = await readTopic(kafka, `${topic}.poison`, 1);
    expect(record!.key!.toString()).toBe('customer-7');
    expect(JSON.parse(record!.value!.toString())).toEqual({ amount: 1 });
    expect(record!.headerText).toMatchObject({
      'x-inboxed-reason': 'permanent-failure',
      'x-inboxed-error-code': 'PERMANENT_FAILURE',
      'x-inboxed-consumer': 'billing',
      'x-inboxed-message-id': 'pay-bad',
      'x-inboxed-attempt': '1',
      'x-inboxed-original-topic': topic,
      'x-inboxed-original-partition': '0',
      'x-inboxed-original-offset': '0',
      'x-inboxed-group-id': groupId,
      'trace-id': 'abc',
    });
    expect(record!.headerText['x-inboxed-error']).toContain('card number rejected by the ledger');
  });

  it('a record failing maxAttempts times is dead-lettered with max-attempts-exceeded', async () => {
    await createTopic(kafka, topic, 1);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(
        async () => {
          throw new Error('always down');
        },
        { db: t.db, consumer: 'billing', tables: { schema: t.schema }, maxAttempts: 3, backoff: { baseDelayMs: 10, maxDelayMs: 50 } },
      ),
    );
    await produce(kafka, topic, [{ id: 'pay-1', value: { amount: 1 } }]);
    await start({ handler: processor });
    await recorder.waitFor('pay-1', { status: 'dead-letter', timeoutMs: 20_000 });
    await waitFor('offset 1 committed', async () => (await committedOffsets(kafka, groupId, topic))[0] === 1);
    expect(recorder.outcomes.map((o) => o.status)).toEqual(['retry', 'retry', 'dead-letter']);
    const [record] = await readTopic(kafka, `${topic}.dlq`, 1);
    expect(record!.headerText).toMatchObject({ 'x-inboxed-reason': 'max-attempts-exceeded', 'x-inboxed-attempt': '3', 'x-inboxed-message-id': 'pay-1' });
  });

  it('a payload conflict (same id, different payload) is dead-lettered with payload-mismatch', async () => {
    await createTopic(kafka, topic, 1);
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(async (message: InboxMessage, tx: any) => void (await tx.insert(t.effects).values({ messageId: message.id, value: message.payload })), {
        db: t.db,
        consumer: 'billing',
        tables: { schema: t.schema },
      }),
    );
    await produce(kafka, topic, [
      { id: 'pay-1', value: { amount: 10 } },
      { id: 'pay-1', value: { amount: 99 } },
    ]);
    await start({ handler: processor });
    await recorder.waitFor('pay-1', { status: 'conflict' });
    await waitFor('offset 2 committed', async () => (await committedOffsets(kafka, groupId, topic))[0] === 2);
    expect(await t.countEffects('pay-1')).toBe(1);
    const [record] = await readTopic(kafka, `${topic}.dlq`, 1);
    expect(JSON.parse(record!.value!.toString())).toEqual({ amount: 99 });
    expect(record!.headerText).toMatchObject({
      'x-inboxed-reason': 'payload-mismatch',
      'x-inboxed-error-code': 'PAYLOAD_MISMATCH',
      'x-inboxed-original-offset': '1',
    });
  });
});
