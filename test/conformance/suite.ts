import { type AnyInboxProcessor, type InboxMessage, PermanentError, withInbox, withInboxBatch } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';
import { createOutcomeRecorder, type OutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, databaseUrl, type TestDatabase, waitFor } from '@inboxed/test-support';
import { migrate } from '@inboxed/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BrokerHarness } from './harness.js';
import { startWorker } from './workers.js';

/**
 * The promises every broker adapter keeps, as one suite each adapter's tests call with its harness:
 * `conformanceSuite('amqp', () => createHarness())`. It runs against the real broker and PostgreSQL
 * and checks outcomes against the database's rows and the broker's queues, never against what the
 * adapter says it did.
 */
export function conformanceSuite(name: string, createHarness: () => BrokerHarness): void {
  describe(`${name} adapter conformance`, () => {
    let t: TestDatabase;
    let h: BrokerHarness;
    let recorder: OutcomeRecorder;
    const consumers: InboxConsumer[] = [];

    beforeEach(async () => {
      t = await createTestDatabase('node-postgres', { label: `conf_${name}`, poolSize: 12 });
      await migrate(t.db, { schema: t.schema });
      h = createHarness();
      await h.setup();
      recorder = createOutcomeRecorder();
    });
    afterEach(async () => {
      for (const consumer of consumers.splice(0)) await consumer.stop().catch(() => undefined);
      await h.teardown();
      await t.close();
    });

    const inboxOptions = (extra: Record<string, unknown> = {}) => ({
      db: t.db,
      consumer: `${name}.conformance`,
      tables: { schema: t.schema },
      backoff: { baseDelayMs: 50, maxDelayMs: 200, jitter: 'none' as const },
      ...extra,
    });
    /** A processor writing one effects row per message, after `before` (which may throw). */
    const processor = (before: (message: InboxMessage) => void | Promise<void> = () => {}, extra: Record<string, unknown> = {}) =>
      recorder.wrap(
        withInbox(async (message, tx: any) => {
          await before(message);
          await tx.insert(t.effects).values({ messageId: message.id });
        }, inboxOptions(extra)),
      );
    const start = async (handler: AnyInboxProcessor, settings = {}) => {
      const consumer = h.createConsumer(handler, settings);
      consumer.on('error', () => {}); // fault scenarios raise errors on purpose; outcomes are asserted
      consumers.push(consumer);
      await consumer.start();
      return consumer;
    };
    const drained = () => waitFor('everything settled', async () => (await h.pending()) === 0, 30_000);
    const effects = async () => {
      const rows = await t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${t.schema}".effects group by 1 order by 1`);
      return Object.fromEntries(rows.map((r) => [r.message_id, Number(r.n)]));
    };
    /** The dead-letter records in the database (what `inboxed dead-letters` lists), oldest first. */
    const deadLetterRows = () =>
      t.query<{ message_id: string; reason: string; error_code: string | null; attempts: number; destination: string | null; source: string | null }>(
        `select message_id, reason, error_code, attempts, destination, source from "${t.schema}".inbox_dead_letters order by id`,
      );
    const attemptRows = () => t.query<{ message_id: string; attempts: number }>(`select message_id, attempts from "${t.schema}".inbox_attempts`);
    const deadLetterFor = (id: string) => waitFor(`a dead-letter of ${id}`, async () => (await h.deadLetters()).find((d) => d.id === id), 30_000);

    it('a message delivered three times has one effect: processed once, acknowledged as a duplicate twice', async () => {
      await h.publish([1, 2, 3].map(() => ({ id: 'dup-1', payload: { amount: 10 } })));
      await start(processor());
      await recorder.waitForCount(3, undefined, 30_000);
      expect(recorder.counts()).toEqual({ processed: 1, duplicate: 2 });
      await drained();
      expect(await effects()).toEqual({ 'dup-1': 1 });
    });

    it('ten copies consumed concurrently still have one effect', async () => {
      await h.publish(Array.from({ length: 10 }, () => ({ id: 'copies-1', payload: { amount: 10 } })));
      await start(processor(() => new Promise((r) => setTimeout(r, 20))));
      await recorder.waitForCount(10, undefined, 30_000);
      expect(recorder.counts().processed).toBe(1);
      await drained();
      expect(await effects()).toEqual({ 'copies-1': 1 });
    });

    it('fails twice, then succeeds: two retries, then one effect, nothing left behind', async () => {
      let calls = 0;
      await h.publish([{ id: 'flaky-1', payload: {} }]);
      const retries: number[] = [];
      const consumer = await start(
        processor(() => {
          if (++calls <= 2) throw new Error(`transient ${calls}`);
        }),
      );
      consumer.on('retry', (outcome) => retries.push(outcome.attempt ?? 0));
      await recorder.waitFor('flaky-1', { status: 'processed', timeoutMs: 30_000 });
      expect(retries).toEqual([1, 2]);
      await drained();
      expect(await effects()).toEqual({ 'flaky-1': 1 });
    });

    it('a permanent failure is dead-lettered with its reason, error code and the original id and body; no effect', async () => {
      await h.publish([{ id: 'poison-1', payload: { kind: 'poison' } }]);
      await start(
        processor(() => {
          throw new PermanentError('card declined forever');
        }),
      );
      const dead = await deadLetterFor('poison-1');
      expect(dead).toMatchObject({ reason: 'permanent-failure', errorCode: 'PERMANENT_FAILURE' });
      expect(JSON.parse(dead.body)).toEqual({ kind: 'poison' });
      await drained();
      expect(await effects()).toEqual({});
      // On record in the database too, with where it went and came from; its attempts record moved there.
      const [row, ...more] = await deadLetterRows();
      expect(more).toEqual([]);
      expect(row).toMatchObject({ message_id: 'poison-1', reason: 'permanent-failure', error_code: 'PERMANENT_FAILURE', attempts: 1 });
      expect(row?.destination).toMatch(new RegExp(`^(${h.broker}:|https?://)`));
      expect(row?.source).toMatch(new RegExp(`^${h.broker}:`));
      expect(await attemptRows()).toEqual([]);
    });

    it('a message failing maxAttempts times is dead-lettered as max-attempts-exceeded', async () => {
      await h.publish([{ id: 'always-fails', payload: {} }]);
      await start(
        processor(
          () => {
            throw new Error('broken');
          },
          { maxAttempts: 2 },
        ),
      );
      expect(await deadLetterFor('always-fails')).toMatchObject({ reason: 'max-attempts-exceeded', errorCode: 'MAX_ATTEMPTS_EXCEEDED' });
      await drained();
    });

    it('dead-lettered after maxAttempts, then replayed from the dead-letter target: a fresh retry budget (retried, not dead-lettered at once), then processed', async () => {
      let calls = 0;
      await h.publish([{ id: 'replayed-1', payload: { n: 1 } }]);
      const consumer = await start(
        processor(
          () => {
            // Two failures in its first life, one after the replay, then it works.
            if (++calls <= 3) throw new Error(`broken ${calls}`);
          },
          { maxAttempts: 2 },
        ),
      );
      const dead = await deadLetterFor('replayed-1');
      expect(dead).toMatchObject({ reason: 'max-attempts-exceeded' });
      await drained();
      expect(await deadLetterRows()).toMatchObject([
        { message_id: 'replayed-1', reason: 'max-attempts-exceeded', error_code: 'MAX_ATTEMPTS_EXCEEDED', attempts: 2 },
      ]);
      expect(await attemptRows()).toEqual([]);

      // What a replay tool does: the dead-letter's body back onto the destination, same message id.
      const afterReplay: string[] = [];
      consumer.on('retry', (outcome) => afterReplay.push(`retry:${outcome.reason}:${outcome.attempt}`));
      consumer.on('dead_letter', (outcome) => afterReplay.push(`dead-letter:${outcome.reason}`));
      recorder.clear();
      await h.publish([{ id: 'replayed-1', payload: JSON.parse(dead.body) }]);
      await recorder.waitFor('replayed-1', { status: 'processed', timeoutMs: 30_000 });
      expect(afterReplay).toEqual(['retry:handler-failed:1']);
      await drained();
      expect(await effects()).toEqual({ 'replayed-1': 1 });
      expect(await deadLetterRows()).toHaveLength(1);
    });

    it('a dead-letter that cannot be recorded in the database is not sent: the delivery comes back until it can be', async () => {
      const codes: string[] = [];
      const consumer = await start(
        processor(() => {
          throw new PermanentError('poison');
        }),
      );
      consumer.on('error', (error) => codes.push(String(error.code)));
      await t.query(`alter table "${t.schema}".inbox_dead_letters rename to inbox_dead_letters_away`);
      await h.publish([{ id: 'unrecorded-1', payload: {} }]);
      await waitFor('DEAD_LETTER_NOT_RECORDED', () => codes.includes('DEAD_LETTER_NOT_RECORDED'), 30_000);
      expect((await h.deadLetters()).filter((d) => d.id === 'unrecorded-1')).toEqual([]);
      await t.query(`alter table "${t.schema}".inbox_dead_letters_away rename to inbox_dead_letters`);
      await deadLetterFor('unrecorded-1');
      await drained();
      expect(await deadLetterRows()).toMatchObject([{ message_id: 'unrecorded-1', reason: 'permanent-failure' }]);
    });

    it('the same id with another payload is a conflict, dead-lettered as payload-mismatch; the first effect stands', async () => {
      await h.publish([
        { id: 'conflict-1', payload: { amount: 20 } },
        { id: 'conflict-1', payload: { amount: 200 } },
      ]);
      await start(processor());
      expect(await deadLetterFor('conflict-1')).toMatchObject({ reason: 'payload-mismatch', errorCode: 'PAYLOAD_MISMATCH' });
      await drained();
      expect(await effects()).toEqual({ 'conflict-1': 1 });
      expect(await deadLetterRows()).toMatchObject([{ message_id: 'conflict-1', reason: 'payload-mismatch', error_code: 'PAYLOAD_MISMATCH' }]);
    });

    it('a body that is not JSON is dead-lettered as unparseable-body, and the outcome reaches processor observers', async () => {
      await h.publish([{ id: 'garbled-1', body: '{"amount": ' }]);
      await start(processor());
      expect(await deadLetterFor('garbled-1')).toMatchObject({ reason: 'unparseable-body', body: '{"amount": ' });
      expect(await recorder.waitFor('garbled-1', { status: 'dead-letter', timeoutMs: 10_000 })).toMatchObject({ reason: 'unparseable-body' });
      await drained();
    });

    it('a message without an id is dead-lettered as missing-message-id, not processed', async () => {
      await h.publish([{ payload: { orphan: true } }]);
      await start(processor());
      await waitFor('a missing-message-id dead-letter', async () => (await h.deadLetters()).find((d) => d.reason === 'missing-message-id'), 30_000);
      await drained();
      expect(await effects()).toEqual({});
      expect(await deadLetterRows()).toMatchObject([{ message_id: '', reason: 'missing-message-id' }]);
    });

    it('a processor that throws (a broken middleware) leaves the delivery to be retried, never acknowledged', async () => {
      let throws = true;
      const inner = processor();
      const broken = Object.assign(
        async (message: InboxMessage) => {
          if (throws) {
            throws = false;
            throw new Error('middleware bug');
          }
          return inner(message);
        },
        { kind: 'single' as const, consumer: inner.consumer, checkTables: () => inner.checkTables(), observe: inner.observe },
      );
      const consumer = h.createConsumer(broken);
      consumers.push(consumer);
      const errors: string[] = [];
      const retries: string[] = [];
      consumer.on('error', (error) => errors.push(String(error.code)));
      consumer.on('retry', (outcome) => retries.push(String(outcome.reason)));
      await consumer.start();
      await h.publish([{ id: 'threw-1', payload: {} }]);
      await recorder.waitFor('threw-1', { status: 'processed', timeoutMs: 30_000 });
      expect(retries).toEqual(['processor-threw']);
      expect(errors).toContain('PROCESSOR_THREW');
      await drained();
      expect(await effects()).toEqual({ 'threw-1': 1 });
    });

    it('one lifecycle: idle, running, stopped, started again; started/stopped events; status() for probes', async () => {
      const consumer = h.createConsumer(processor());
      consumers.push(consumer);
      const events: string[] = [];
      consumer.on('started', () => events.push('started'));
      consumer.on('stopped', () => events.push('stopped'));
      expect(consumer.status()).toMatchObject({ state: 'idle', consuming: false, inFlight: 0 });
      await consumer.start();
      await consumer.start(); // starting a running consumer does nothing
      expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true });
      await h.publish([{ id: 'life-1', payload: {} }]);
      await recorder.waitFor('life-1', { status: 'processed', timeoutMs: 30_000 });
      await waitFor('lastSettledAt', () => consumer.status().lastSettledAt);
      await consumer.stop();
      await consumer.stop(); // idempotent
      expect(consumer.status()).toMatchObject({ state: 'stopped', consuming: false });
      await consumer.start(); // restartable
      await h.publish([{ id: 'life-2', payload: {} }]);
      await recorder.waitFor('life-2', { status: 'processed', timeoutMs: 30_000 });
      await consumer.stop();
      expect(events).toEqual(['started', 'stopped', 'started', 'stopped']);
      expect(await effects()).toEqual({ 'life-1': 1, 'life-2': 1 });
    });

    it('stop() under load: handlers see their signal, nothing is lost or applied twice across a restart', async () => {
      const ids = Array.from({ length: 60 }, (_, i) => `load-${i}`);
      await h.publish(ids.map((id) => ({ id, payload: {} })));
      const signals: boolean[] = [];
      const slow = recorder.wrap(
        withInbox(async (message, tx: any, { signal }) => {
          await new Promise((r) => setTimeout(r, 15));
          signals.push(signal.aborted);
          await tx.insert(t.effects).values({ messageId: message.id });
        }, inboxOptions()),
      );
      const first = await start(slow, { stopTimeoutMs: 10_000 });
      await recorder.waitForCount(10, (o) => o.status === 'processed', 30_000);
      await first.stop();
      // A graceful stop settles what it committed: the broker still holds exactly the rest.
      const appliedAtStop = Object.keys(await effects()).length;
      await waitFor('the broker to hold exactly the uncommitted messages', async () => (await h.pending()) === ids.length - appliedAtStop, 15_000);
      const second = await start(processor());
      await waitFor('every message applied', async () => Object.keys(await effects()).length === ids.length, 60_000);
      await second.stop();
      await drained();
      const applied = await effects();
      expect(Object.values(applied).every((n) => n === 1)).toBe(true);
      expect(Object.keys(applied).sort()).toEqual([...ids].sort());
    });

    it('batch mode isolates a poison message: its neighbours commit, it alone is dead-lettered', async () => {
      const ids = Array.from({ length: 20 }, (_, i) => `batch-${i}`);
      await h.publish(ids.map((id) => ({ id, payload: {} })));
      const batch = recorder.wrap(
        withInboxBatch(async (messages, tx: any) => {
          if (messages.some((m) => m.id === 'batch-7')) throw new PermanentError('poison in the batch');
          await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
        }, inboxOptions()),
      );
      await start(batch);
      expect(await deadLetterFor('batch-7')).toMatchObject({ reason: 'permanent-failure' });
      await waitFor('19 effects', async () => Object.keys(await effects()).length === 19, 30_000);
      await drained();
      expect(Object.keys(await effects()).sort()).toEqual(ids.filter((id) => id !== 'batch-7').sort());
    });

    it('SIGKILL between the commit and the settle: the redelivery is a duplicate, one effect', async () => {
      await h.publish([{ id: 'killed-1', payload: {} }]);
      const env = { ...h.workerEnv(), BROKER: h.broker, DATABASE_URL: databaseUrl(), SCHEMA: t.schema, CONSUMER_NAME: `${name}.conformance` };
      const doomed = startWorker({ ...env, CRASH: 'after-commit' });
      const { signal } = await doomed.exited;
      expect(signal, doomed.output()).toBe('SIGKILL');
      expect(doomed.settling).toEqual([['processed', 'killed-1']]);
      expect(await effects()).toEqual({ 'killed-1': 1 }); // committed, never settled with the broker
      const survivor = startWorker(env);
      try {
        await survivor.waitFor('settling duplicate killed-1', 60_000);
        await drained();
        expect(await effects()).toEqual({ 'killed-1': 1 });
      } finally {
        survivor.kill('SIGTERM');
        await survivor.exited;
      }
    });
  });
}
