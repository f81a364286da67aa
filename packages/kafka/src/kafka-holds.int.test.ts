import { OutcomeReasons, PermanentError, withInbox, withInboxBatch, wrapProcessor, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { useKafkaTestKit } from '../test/kafka-test-kit.js';
import { KafkaErrorCodes, type KafkaLike } from './index.js';

// Kafka redelivers by holding a partition at the failing record (pause, seek back, resume after
// the backoff): per-partition order under failure, and dead-letter topics with Kafka's own headers.
describe('retry holds and dead-letter topics', () => {
  const k = useKafkaTestKit({ partitions: 2 });

  it('a failing record holds back its partition while another partition progresses, then succeeds after retries', async () => {
    const slow = ['a-0', 'a-1', 'a-2'];
    const fast = ['b-0', 'b-1', 'b-2', 'b-3', 'b-4'];
    await k.h.produce([...slow.map((id) => ({ id, value: { id }, partition: 0 })), ...fast.map((id) => ({ id, value: { id }, partition: 1 }))]);
    let failures = 0;
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(
        async (message: InboxMessage, tx: any) => {
          // a-0 keeps failing until every record of the other partition is applied (and at least twice).
          if (message.id === 'a-0' && (failures < 2 || (await k.t.countEffects()) < fast.length)) {
            failures++;
            throw new Error('ledger unavailable');
          }
          await tx.insert(k.t.effects).values({ messageId: message.id });
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema }, maxAttempts: 100, backoff: { baseDelayMs: 20, maxDelayMs: 200 } },
      ),
    );
    const retries: string[] = [];
    const consumer = await k.start(processor);
    consumer.on('retry', (outcome) => retries.push(outcome.messageId));

    await recorder.waitFor('a-2', { status: 'processed', timeoutMs: 30_000 });
    const order = await k.applied();
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
      const committed = await k.h.committed();
      return committed[0] === 3 && committed[1] === 5;
    });
  });

  it('batch processor: a failing record stops the offset and holds later calls of its partition until it succeeds', async () => {
    const ids = Array.from({ length: 10 }, (_, i) => `r-${i}`);
    await k.h.produce(ids.map((id) => ({ id, value: { id }, partition: 0 })));
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
          await tx.insert(k.t.effects).values(messages.map((m) => ({ messageId: m.id })));
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema }, backoff: { baseDelayMs: 20, maxDelayMs: 100 } },
      ),
    );
    await k.start(processor, { batchSize: 3 });
    await recorder.waitFor('r-9', { status: 'processed', timeoutMs: 30_000 });
    await waitFor('offset 10 committed', async () => (await k.h.committed())[0] === 10);
    const order = await k.applied();
    expect([...order].sort()).toEqual([...ids].sort());
    // Later calls (r-6 onwards) were applied only after the held record.
    for (const later of ids.slice(6)) expect(order.indexOf(later)).toBeGreaterThan(order.indexOf('r-4'));
    const r4 = recorder.outcomes.filter((o) => o.messageId === 'r-4').map((o) => o.status);
    expect(r4[0]).toBe('retry');
    expect(r4.at(-1)).toBe('processed');
  });

  it('busy (another worker holds the lease): the partition waits at the record for retryAfterMs, in order, never committed past nor dead-lettered, then processed', async () => {
    const ids = ['b-0', 'b-1', 'b-2', 'b-3'];
    const calls: string[] = [];
    const busyAt: number[] = [];
    const committedWhileBusy: number[] = [];
    const processor = wrapProcessor(
      withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(k.t.effects).values({ messageId: message.id });
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
      ),
      async (message, next): Promise<InboxOutcome> => {
        calls.push(message.id);
        if (message.id !== 'b-1') return next(message);
        // Every delivery of b-1 (the two busy ones and the one that finally runs): nothing past it is committed.
        committedWhileBusy.push((await k.h.committed())[0]!);
        if (busyAt.length === 2) return next(message);
        busyAt.push(performance.now());
        return { status: 'busy', reason: OutcomeReasons.LEASE_HELD, retryAfterMs: 200, messageId: message.id, consumer: 'billing' };
      },
    );
    const consumer = await k.start(processor);
    const busy: string[] = [];
    const retries: string[] = [];
    consumer.on('busy', (outcome) => busy.push(`${outcome.messageId}:${outcome.reason}:${outcome.retryAfterMs}`));
    consumer.on('retry', (outcome) => retries.push(outcome.messageId));
    await k.h.produce(ids.map((id) => ({ id, value: { id }, partition: 0 })));

    await waitFor('b-3 applied', async () => (await k.applied()).includes('b-3'), 30_000);
    expect(await k.applied()).toEqual(ids);
    // b-1 came back only after retryAfterMs each time, and the records after it waited for it.
    expect(calls.filter((id) => id === 'b-1')).toHaveLength(3);
    expect(calls.indexOf('b-2')).toBeGreaterThan(calls.lastIndexOf('b-1'));
    expect(busyAt[1]! - busyAt[0]!).toBeGreaterThanOrEqual(190);
    expect(committedWhileBusy).toEqual([1, 1, 1]);
    expect(busy).toEqual(['b-1:lease-held:200', 'b-1:lease-held:200']);
    expect(retries).toEqual([]);
    // In the end the committed offset is the high watermark, and nothing went to the dead-letter topic.
    await waitFor('offset 4 committed', async () => (await k.h.committed())[0] === 4 && (await k.h.pending()) === 0);
    expect(await k.h.deadLetterRecords()).toEqual([]);
  });

  it('a deadLetterTopic function that throws holds its partition at the record to dead-letter (KAFKA_DEAD_LETTER_FAILED), never past it; records before it commit', async () => {
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(
        async (message: InboxMessage, tx: any) => {
          if (message.id === 'poison') throw new PermanentError('refused');
          await tx.insert(k.t.effects).values({ messageId: message.id });
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
      ),
    );
    await k.h.produce([
      { id: 'before', value: {}, partition: 0 },
      { id: 'poison', value: {}, partition: 0 },
      { id: 'after', value: {}, partition: 0 },
    ]);
    const consumer = await k.start(processor, {
      deadLetterTopic: (topic) => {
        throw new Error(`no dead-letter topic configured for ${topic}`);
      },
    });
    const errors: string[] = [];
    consumer.on('error', (error) => errors.push(error.code));
    await recorder.waitFor('before', { status: 'processed' });
    await waitFor('the dead-letter reported as failed', () => errors.includes('KAFKA_DEAD_LETTER_FAILED'));
    await waitFor('offset 1 committed', async () => (await k.h.committed())[0] === 1);
    await new Promise((r) => setTimeout(r, 500));
    expect((await k.h.committed())[0]).toBe(1); // held at the poison record, not past it
    expect(await k.h.deadLetterRecords()).toEqual([]);
    expect(await k.t.countEffects('after')).toBe(0);
  });

  it('deadLetterTopic: a permanent failure goes, through the idempotent producer, to the topic the function names with the original key, headers and position, and the offset moves past it', async () => {
    const recorder = createOutcomeRecorder();
    const processor = recorder.wrap(
      withInbox(
        async (message: InboxMessage, tx: any) => {
          if (message.id === 'pay-bad') throw new PermanentError('card number rejected by the ledger');
          await tx.insert(k.t.effects).values({ messageId: message.id });
        },
        { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
      ),
    );
    await k.h.produce([
      { id: 'pay-bad', value: { amount: 1 }, key: 'customer-7', headers: { 'trace-id': 'abc' }, partition: 0 },
      { id: 'pay-good', value: { amount: 2 }, partition: 0 },
    ]);
    const dead: string[] = [];
    // The default dead-letter producer is kafkajs' idempotent one (the test broker's proxy gives the mock the controller it needs).
    const producerConfigs: unknown[] = [];
    const kafka: KafkaLike = {
      consumer: (config) => k.h.kafka.consumer(config),
      producer(config) {
        producerConfigs.push(config);
        return k.h.kafka.producer(config);
      },
    };
    const consumer = await k.start(processor, { kafka, deadLetterTopic: (source) => `${source}.dlq` });
    expect(producerConfigs).toEqual([{ idempotent: true, maxInFlightRequests: 1 }]);
    consumer.on('dead_letter', (outcome, destination, timing) => dead.push(`${outcome.messageId}:${outcome.reason}:${destination}:${timing.durationMs >= 0}`));

    await recorder.waitFor('pay-good', { status: 'processed' });
    await waitFor('offset 2 committed', async () => (await k.h.committed())[0] === 2);
    expect(dead).toEqual([`pay-bad:permanent-failure:${k.h.deadLetterTopic}:true`]);
    expect(await k.t.countEffects()).toBe(1);

    const [record] = await k.h.deadLetterRecords();
    expect(record!.key!.toString()).toBe('customer-7');
    expect(JSON.parse(record!.value!.toString())).toEqual({ amount: 1 });
    expect(record!.headerText).toMatchObject({
      'x-inboxed-reason': 'permanent-failure',
      'x-inboxed-error-code': 'PERMANENT_FAILURE',
      'x-inboxed-consumer': 'billing',
      'x-inboxed-message-id': 'pay-bad',
      'x-inboxed-attempt': '1',
      'x-inboxed-original-topic': k.h.topic,
      'x-inboxed-original-partition': '0',
      'x-inboxed-original-offset': '0',
      'x-inboxed-group-id': k.h.groupId,
      'trace-id': 'abc',
    });
    expect(record!.headerText['x-inboxed-error']).toContain('card number rejected by the ledger');
  });
});

// Defence in depth: adapter code that throws where nothing should (here the test hook, or a
// processor's own `observe`) holds its partition at the record, reported; the consumer never crashes.
describe('a settle path that throws unexpectedly', () => {
  const k = useKafkaTestKit({ partitions: 1 });
  const processor = () =>
    withInbox(
      async (message: InboxMessage, tx: any) => {
        if (message.id.startsWith('perm')) throw new PermanentError('permanent');
        await tx.insert(k.t.effects).values({ messageId: message.id });
      },
      { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema }, backoff: { baseDelayMs: 20, maxDelayMs: 100 } },
    );

  it('settling throws three times at a record: the partition is held there (nothing committed past it), reported, then goes on; no crash', async () => {
    await k.h.produce(['bad', 'ok-1', 'ok-2'].map((id) => ({ id, value: { id } })));
    const recorder = createOutcomeRecorder();
    let throws = 0;
    const committedWhileFailing: number[] = [];
    const consumer = await k.start(recorder.wrap(processor()), {
      beforeSettle: async (outcome) => {
        if (outcome.messageId !== 'bad' || throws >= 3) return;
        throws++;
        committedWhileFailing.push((await k.h.committed())[0] ?? -1);
        throw new Error(`settle boom ${throws}`);
      },
    });
    const errors: { code: string; message: string }[] = [];
    const states: string[] = [];
    consumer.on('error', (e) => {
      errors.push({ code: String(e.code), message: e.message });
      states.push(consumer.status().state);
    });

    await recorder.waitFor('ok-2', { status: 'processed', timeoutMs: 30_000 });
    await waitFor('offset 3 committed', async () => (await k.h.committed())[0] === 3, 15_000);
    expect(throws).toBe(3);
    expect(committedWhileFailing.every((offset) => offset <= 0)).toBe(true);
    expect(errors.map((e) => e.code)).toEqual([KafkaErrorCodes.KAFKA_SETTLE_FAILED, KafkaErrorCodes.KAFKA_SETTLE_FAILED, KafkaErrorCodes.KAFKA_SETTLE_FAILED]);
    expect(errors[0]!.message).toContain('from offset 0 threw unexpectedly; the partition is held there');
    expect(errors[0]!.message).toContain('settle boom 1');
    expect(states.every((state) => state === 'running')).toBe(true);
    // 'bad' ran again each time (a duplicate after the first commit of its effect); the records behind it waited.
    const statuses = recorder.outcomes.map((o) => `${o.messageId}:${o.status}`);
    expect(statuses).toEqual(['bad:processed', 'bad:duplicate', 'bad:duplicate', 'bad:duplicate', 'ok-1:processed', 'ok-2:processed']);
    expect(await k.applied()).toEqual(['bad', 'ok-1', 'ok-2']);
    expect(await k.h.pending()).toBe(0);
    expect(consumer.status()).toMatchObject({ state: 'running', consuming: true });
  });

  it('a processor whose observe throws, on a record the adapter decides itself (no id): dead-lettered and committed, the partition flows, no crash', async () => {
    const hostile = processor();
    hostile.observe = () => {
      throw new Error('observe boom');
    };
    await k.h.produce([{ value: { n: 0 } }, { id: 'ok-1', value: { n: 1 } }]);
    const errors: string[] = [];
    const consumer = await k.start(hostile);
    consumer.on('error', (e) => errors.push(String(e.code)));

    await waitFor('offset 2 committed', async () => (await k.h.committed())[0] === 2, 20_000);
    const dead = await k.h.deadLetterRecords();
    expect(dead).toHaveLength(1);
    expect(dead[0]!.headerText['x-inboxed-reason']).toBe('missing-message-id');
    expect(await k.applied()).toEqual(['ok-1']);
    expect(await k.h.pending()).toBe(0);
    expect(errors).toEqual([]);
    expect(consumer.status()).toMatchObject({ state: 'running', consuming: true });
  });
});
