import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes, PermanentError } from './errors.js';
import { reject, type InboxMessage } from './types.js';
import { withInbox } from './with-inbox.js';

// The same behaviour, proven on every supported driver: real PostgreSQL through node-postgres and
// postgres-js, and embedded PGlite.
describe.each(DRIVERS)('withInbox on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 20 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  const inboxRows = () =>
    t.query<{ message_id: string; status: string; reason: string | null }>(`select message_id, status, reason from "${t.schema}".inbox order by message_id`);
  const attemptRows = () =>
    t.query<{ message_id: string; attempts: number; last_error: string }>(`select message_id, attempts, last_error from "${t.schema}".inbox_attempts`);

  type Handler = (message: InboxMessage, tx: any) => Promise<unknown>;
  function processor(
    handler: Handler = vi.fn(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id, value: message.payload });
    }),
    extra: Record<string, unknown> = {},
  ) {
    const process = withInbox(handler as never, { db: t.db, consumer: 'test-consumer', tables: { schema: t.schema }, backoff: { baseDelayMs: 10 }, ...extra });
    return { process, handler };
  }

  it('50 concurrent copies of one message: exactly one effect, 49 duplicates', async () => {
    const { process, handler } = processor(
      vi.fn(async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        await new Promise((r) => setTimeout(r, 20)); // widen the race window
      }),
    );
    const outcomes = await Promise.all(Array.from({ length: 50 }, () => process({ id: 'order-1', payload: { amount: 10 } })));
    const counts: Record<string, number> = {};
    for (const o of outcomes) counts[o.status] = (counts[o.status] ?? 0) + 1;
    expect(counts).toEqual({ processed: 1, duplicate: 49 });
    expect(await t.countEffects('order-1')).toBe(1);
    expect(handler).toHaveBeenCalledTimes(1);
    expect(await inboxRows()).toEqual([{ message_id: 'order-1', status: 'processed', reason: null }]);
  });

  it('a handler that throws after its domain write persists nothing; a later attempt succeeds', async () => {
    let calls = 0;
    const { process } = processor(
      vi.fn(async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        if (++calls === 1) throw new Error('downstream hiccup');
      }),
    );
    const first = await process({ id: 'm-1', payload: { a: 1 } });
    expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(first.error?.code).toBe(InboxErrorCodes.HANDLER_FAILED);
    expect(first.retryAfterMs).toBeGreaterThanOrEqual(0);
    expect(await t.countEffects()).toBe(0);
    expect(await inboxRows()).toEqual([]);
    expect(await attemptRows()).toEqual([{ message_id: 'm-1', attempts: 1, last_error: 'Error: downstream hiccup' }]);

    const second = await process({ id: 'm-1', payload: { a: 1 } });
    expect(second.status).toBe('processed');
    expect(await t.countEffects()).toBe(1);
    // The failure record does not block success and keeps the last error for inspection.
    expect(await attemptRows()).toHaveLength(1);
  });

  it('a redelivery after commit is a duplicate and the handler is not called', async () => {
    const { process, handler } = processor();
    expect((await process({ id: 'm-2', payload: { a: 1 } })).status).toBe('processed');
    const again = await process({ id: 'm-2', payload: { a: 1 }, attempt: 2 });
    expect(again).toMatchObject({ status: 'duplicate', messageId: 'm-2', consumer: 'test-consumer' });
    expect(handler).toHaveBeenCalledTimes(1);
    expect(await t.countEffects()).toBe(1);
  });

  it('the same payload with a different key order is a duplicate', async () => {
    const { process } = processor();
    await process({ id: 'm-3', payload: { amount: 10, currency: 'EUR', items: [{ sku: 'a', qty: 1 }] } });
    const outcome = await process({ id: 'm-3', payload: { items: [{ qty: 1.0, sku: 'a' }], currency: 'EUR', amount: 10 } });
    expect(outcome.status).toBe('duplicate');
    expect(await t.countEffects()).toBe(1);
  });

  it('a different payload under a known id is a conflict, never silently acked', async () => {
    const { process, handler } = processor();
    await process({ id: 'm-4', payload: { amount: 20 } });
    const outcome = await process({ id: 'm-4', payload: { amount: 200 } });
    expect(outcome).toMatchObject({ status: 'conflict', reason: 'payload-mismatch' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.PAYLOAD_MISMATCH);
    expect(handler).toHaveBeenCalledTimes(1);
    expect(await t.countEffects()).toBe(1);
  });

  it('onPayloadMismatch "duplicate" acks the mismatch but still reports it', async () => {
    const { process } = processor(undefined, { onPayloadMismatch: 'duplicate' });
    await process({ id: 'm-5', payload: { amount: 20 } });
    const outcome = await process({ id: 'm-5', payload: { amount: 200 } });
    expect(outcome).toMatchObject({ status: 'duplicate', reason: 'payload-mismatch' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.PAYLOAD_MISMATCH);
  });

  it('a fingerprint function that leaves out transport fields treats them as the same message', async () => {
    const { process } = processor(undefined, { fingerprint: (m: InboxMessage) => (m.payload as { order: unknown }).order });
    await process({ id: 'm-6', payload: { order: { id: 1 }, traceId: 'a' } });
    expect((await process({ id: 'm-6', payload: { order: { id: 1 }, traceId: 'b' } })).status).toBe('duplicate');
    expect((await process({ id: 'm-6', payload: { order: { id: 2 }, traceId: 'b' } })).status).toBe('conflict');
  });

  it.each([
    ['missing', undefined, 'missing-message-id'],
    ['null', null, 'missing-message-id'],
    ['empty', '', 'missing-message-id'],
    ['blank', '   ', 'missing-message-id'],
    ['a number', 42, 'invalid-message-id'],
    ['an object', { id: 1 }, 'invalid-message-id'],
    ['over 512 bytes', 'é'.repeat(257), 'invalid-message-id'],
    ['containing NUL', 'a\u0000b', 'invalid-message-id'],
  ])('a %s id is dead-lettered without touching the database', async (_label, id, reason) => {
    const { process, handler } = processor();
    const outcome = await process({ id, payload: {} } as unknown as InboxMessage);
    expect(outcome).toMatchObject({ status: 'dead-letter', reason });
    expect(outcome.error?.code).toBe(InboxErrorCodes.INVALID_MESSAGE_ID);
    expect(handler).not.toHaveBeenCalled();
    expect(await inboxRows()).toEqual([]);
    expect(await attemptRows()).toEqual([]);
  });

  it('an id of exactly 512 bytes is accepted', async () => {
    const { process } = processor();
    expect((await process({ id: 'x'.repeat(512), payload: {} })).status).toBe('processed');
  });

  it('a payload that cannot be fingerprinted, or fails parse, is dead-lettered without touching the database', async () => {
    const { process, handler } = processor(undefined, {
      parse: (payload: unknown) => {
        if (typeof (payload as { amount?: unknown }).amount !== 'number') throw new TypeError('amount must be a number');
        return payload;
      },
    });
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(await process({ id: 'bad-1', payload: { amount: 1n } })).toMatchObject({ status: 'dead-letter', reason: 'unfingerprintable-payload' });
    expect(await process({ id: 'bad-2', payload: cyclic })).toMatchObject({ status: 'dead-letter', reason: 'unfingerprintable-payload' });
    const invalid = await process({ id: 'bad-3', payload: { amount: 'ten' } });
    expect(invalid).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
    expect(invalid.error?.code).toBe(InboxErrorCodes.VALIDATION_FAILED);
    expect(handler).not.toHaveBeenCalled();
    expect(await inboxRows()).toEqual([]);
  });

  it('attempts are counted durably and exhausting them dead-letters the message', async () => {
    const failing = vi.fn(async () => {
      throw new Error('always broken');
    });
    const first = processor(failing, { maxAttempts: 3 }).process;
    expect(await first({ id: 'm-7', payload: {} })).toMatchObject({ status: 'retry', attempt: 1 });
    expect(await first({ id: 'm-7', payload: {} })).toMatchObject({ status: 'retry', attempt: 2 });
    // A "restart": a new processor and a broker that reports no delivery count still sees attempt 3.
    const restarted = processor(failing, { maxAttempts: 3 }).process;
    const last = await restarted({ id: 'm-7', payload: {} });
    expect(last).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded', attempt: 3 });
    expect(last.error?.code).toBe(InboxErrorCodes.MAX_ATTEMPTS_EXCEEDED);
    expect(last.firstAttemptAt).toBeInstanceOf(Date);
    expect(last.lastAttemptAt!.getTime()).toBeGreaterThanOrEqual(last.firstAttemptAt!.getTime());
    expect(await inboxRows()).toEqual([]);
  });

  it('attempts are the durable count of handler failures: a broker count inflated by outage redeliveries does not dead-letter', async () => {
    let fail = true;
    const { process } = processor(
      vi.fn(async (message: InboxMessage, tx: any) => {
        if (fail) throw new Error('broken');
        await tx.insert(t.effects).values({ messageId: message.id });
      }),
      { maxAttempts: 3 },
    );
    // SQS says this is the 7th receive (six of them redeliveries during a database outage).
    expect(await process({ id: 'm-8', payload: {}, attempt: 7 })).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    fail = false;
    expect(await process({ id: 'm-8', payload: {}, attempt: 8 })).toMatchObject({ status: 'processed' });
    expect(await t.countEffects('m-8')).toBe(1);
  });

  it("the broker's count is the fallback only when the attempt cannot be recorded for another reason than an outage", async () => {
    // Every new attempts row now violates a constraint: the ledger cannot be written, the database is up.
    await t.query(`alter table "${t.schema}".inbox_attempts add constraint no_writes check (attempts < 0) not valid`);
    const { process } = processor(
      vi.fn(async () => {
        throw new Error('broken');
      }),
      { maxAttempts: 3 },
    );
    const early = await process({ id: 'm-8b', payload: {}, attempt: 1 });
    expect(early).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(early.error?.message).toMatch(/could not be recorded/);
    expect(await process({ id: 'm-8b', payload: {}, attempt: 3 })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded', attempt: 3 });
  });

  it('a PermanentError or a validation error dead-letters at once', async () => {
    const { process } = processor(
      vi.fn(async (message: InboxMessage) => {
        if (message.id === 'perm') throw new PermanentError('card declined forever');
        const error = new Error('bad shape');
        error.name = 'ZodError';
        throw error;
      }),
    );
    const permanent = await process({ id: 'perm', payload: {} });
    expect(permanent).toMatchObject({ status: 'dead-letter', reason: 'permanent-failure', attempt: 1 });
    expect(permanent.error?.code).toBe(InboxErrorCodes.PERMANENT_FAILURE);
    expect(await process({ id: 'zod', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'permanent-failure' });
  });

  it('reject() is recorded as completed; a redelivery is acked without running the handler', async () => {
    const handler = vi.fn(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id, value: { declined: true } });
      return reject('insufficient-funds');
    });
    const { process } = processor(handler);
    expect(await process({ id: 'm-9', payload: { amount: 1e6 } })).toMatchObject({ status: 'rejected', reason: 'insufficient-funds' });
    expect(await process({ id: 'm-9', payload: { amount: 1e6 } })).toMatchObject({ status: 'duplicate', reason: 'insufficient-funds' });
    expect(handler).toHaveBeenCalledTimes(1);
    expect(await inboxRows()).toEqual([{ message_id: 'm-9', status: 'rejected', reason: 'insufficient-funds' }]);
    expect(await t.countEffects()).toBe(1);
  });

  it('serialization failures and deadlocks are retried transparently', async () => {
    let calls = 0;
    const { process } = processor(
      vi.fn(async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        if (++calls < 3) throw Object.assign(new Error('could not serialize access'), { code: calls === 1 ? '40001' : '40P01' });
      }),
    );
    expect(await process({ id: 'm-10', payload: {} })).toMatchObject({ status: 'processed' });
    expect(calls).toBe(3);
    expect(await t.countEffects()).toBe(1);
    expect(await attemptRows()).toEqual([]);
  });

  it('two consumers each process the same message once', async () => {
    const a = processor(undefined, { consumer: 'billing' }).process;
    const b = processor(undefined, { consumer: 'shipping' }).process;
    expect((await a({ id: 'shared', payload: {} })).status).toBe('processed');
    expect((await b({ id: 'shared', payload: {} })).status).toBe('processed');
    expect((await a({ id: 'shared', payload: {} })).status).toBe('duplicate');
    expect(await t.countEffects()).toBe(2);
  });
});
