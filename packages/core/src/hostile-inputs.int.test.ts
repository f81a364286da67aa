import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import { reject, type InboxMessage } from './types.js';
import { isWellFormed } from './unicode.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

describe.each(DRIVERS)('hostile inputs and callbacks on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  const options = database.options;
  const insert = async (message: InboxMessage, tx: any) => {
    await tx.insert(t.effects).values({ messageId: message.id });
  };
  const tableRows = async (table: string) => t.query(`select * from "${t.schema}".${table}`);

  it.each([
    ['a lone high surrogate', 'order-\uD800'],
    ['a lone low surrogate', '\uDC00-order'],
    ['a reversed pair', 'x\uDC00\uD800'],
  ])('an id with %s is invalid-message-id at once (PostgreSQL would store a different id)', async (_label, id) => {
    const single = withInbox(insert, options());
    const batch = withInboxBatch(async () => {}, options({ consumer: 'b' }));
    for (const outcome of [await single({ id, payload: {} }), (await batch([{ id, payload: {} }]))[0]!]) {
      expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'invalid-message-id' });
      expect(outcome.error?.code).toBe(InboxErrorCodes.INVALID_MESSAGE_ID);
      expect(isWellFormed(outcome.messageId)).toBe(true); // adapters copy it into headers
    }
    expect(await tableRows('inbox')).toEqual([]);
    expect(await tableRows('inbox_attempts')).toEqual([]);
  });

  it.each([
    ['source with NUL', { source: 'amqp:\u0000orders' }],
    ['source with a lone surrogate', { source: 'amqp:\uD800' }],
    ['source of 2000 bytes', { source: 'q'.repeat(2000) }],
    ['receivedAt that is not a Date', { receivedAt: '2026-01-01' }],
    ['receivedAt that is an invalid Date', { receivedAt: new Date('nope') }],
    ['receivedAt in the year 20000', { receivedAt: new Date(Date.UTC(20000, 0, 1)) }],
    ['attempt NaN', { attempt: Number.NaN }],
    ['attempt 0', { attempt: 0 }],
    ['attempt 1.5', { attempt: 1.5 }],
  ])('a delivery with %s is dead-lettered (invalid-message), not retried or counted', async (_label, extra) => {
    const outcome = await withInbox(insert, options())({ id: 'm', payload: {}, ...extra } as InboxMessage);
    expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'invalid-message', messageId: 'm' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.INVALID_MESSAGE);
    expect(await tableRows('inbox')).toEqual([]);
    expect(await tableRows('inbox_attempts')).toEqual([]);
  });

  it('a message whose fields throw when read is dead-lettered, and the processor still resolves', async () => {
    const hostile = new Proxy(
      {},
      {
        get: () => {
          throw new Error('gotcha');
        },
      },
    ) as InboxMessage;
    expect(await withInbox(insert, options())(hostile)).toMatchObject({ status: 'dead-letter', reason: 'invalid-message' });
    expect((await withInboxBatch(async () => {}, options())([hostile, { id: 'ok', payload: 1 }])).map((o) => o.status)).toEqual(['dead-letter', 'processed']);
  });

  it('an isPermanent that throws counts the failure as retryable and says so; the processor resolves', async () => {
    const process = withInbox(
      async () => {
        throw new Error('broken');
      },
      options({
        maxAttempts: 2,
        isPermanent: () => {
          throw new Error('classifier bug');
        },
      }),
    );
    const first = await process({ id: 'm', payload: {} });
    expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(first.error?.message).toContain('isPermanent threw: Error: classifier bug');
    expect(await process({ id: 'm', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
  });

  it('in a batch, an isPermanent that throws for one message keeps every outcome, including those committed', async () => {
    const process = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
        if (messages.some((m) => m.id === 'bad')) throw new Error('poison');
      },
      options({
        isPermanent: () => {
          throw new Error('classifier bug');
        },
      }),
    );
    const outcomes = await process(['a', 'bad', 'c'].map((id) => ({ id, payload: 1 })));
    expect(outcomes.map((o) => [o.messageId, o.status])).toEqual([
      ['a', 'processed'],
      ['bad', 'retry'],
      ['c', 'processed'],
    ]);
    expect(await t.countEffects()).toBe(2);
  });

  it.each([
    [
      'throws',
      () => {
        throw new Error('fp bug');
      },
    ],
    ['returns a Map', () => new Map([['a', 1]])],
    ['returns a class instance', () => new (class Order {})()],
    ['returns undefined', () => undefined],
  ])('a fingerprint function that %s dead-letters the message as unfingerprintable', async (_label, fingerprint) => {
    const outcome = await withInbox(insert, options({ fingerprint }))({ id: 'm', payload: { a: 1 } });
    expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'unfingerprintable-payload' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.FINGERPRINT_FAILED);
  });

  it('parse may be async; a parse that throws or rejects dead-letters the message as validation-failed', async () => {
    const seen: unknown[] = [];
    const parsed = withInbox(async (message) => void seen.push(message.payload), { ...options(), parse: async (p: unknown) => Number(p) * 2 });
    expect(await parsed({ id: 'ok', payload: 21 })).toMatchObject({ status: 'processed' });
    expect(seen).toEqual([42]);
    for (const parse of [
      () => {
        throw new Error('no');
      },
      () => Promise.reject(new Error('no')),
    ]) {
      const outcome = await withInbox(insert, options({ consumer: `c-${seen.length}`, parse }))({ id: 'bad', payload: 1 });
      seen.push(outcome.status);
      expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
    }
  });

  it('a handler returning garbage is a counted failure or a success, never a thrown processor', async () => {
    const hostile = withInbox(
      async () =>
        new Proxy(
          {},
          {
            get: () => {
              throw new Error('gotcha');
            },
          },
        ) as never,
      options(),
    );
    expect(await hostile({ id: 'proxy', payload: {} })).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    const weird = withInbox(async () => 42 as never, options({ consumer: 'weird' }));
    expect(await weird({ id: 'number', payload: {} })).toMatchObject({ status: 'processed' });
  });

  it('a rejection reason that is not storable text is stored made safe, and the message is rejected', async () => {
    const process = withInbox(async () => reject(`out\u0000of\uD800stock${'!'.repeat(1000)}`), options());
    const outcome = await process({ id: 'r', payload: {} });
    expect(outcome.status).toBe('rejected');
    expect(outcome.reason).toMatch(/^out\uFFFDof\uFFFDstock!+$/);
    expect(outcome.reason!.length).toBeLessThanOrEqual(500);
    expect(await t.query(`select status, reason from "${t.schema}".inbox`)).toEqual([{ status: 'rejected', reason: outcome.reason }]);
  });

  it('a batch handler that rewrites message.id in place cannot make a split commit the message again under the new id', async () => {
    const process = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        for (const message of messages) message.id = message.id.toLowerCase(); // "normalised" in place
        if (messages.some((message) => message.id === 'poison')) throw new Error('poison');
        await tx.insert(t.effects).values(messages.map((message) => ({ messageId: message.id })));
      },
      options({ maxAttempts: 5 }),
    );
    const first = await process([
      { id: 'ORDER-1', payload: {} },
      { id: 'poison', payload: {} },
    ]);
    expect(first.map((o) => [o.messageId, o.status])).toEqual([
      ['ORDER-1', 'processed'],
      ['poison', 'retry'],
    ]);
    // Its redelivery (an ack lost, say) is a duplicate of the id the broker knows.
    expect((await process([{ id: 'ORDER-1', payload: {} }]))[0]).toMatchObject({ messageId: 'ORDER-1', status: 'duplicate' });
    expect(await t.query(`select message_id, status from "${t.schema}".inbox`)).toEqual([{ message_id: 'ORDER-1', status: 'processed' }]);
    expect(await t.query(`select message_id from "${t.schema}".effects`)).toEqual([{ message_id: 'order-1' }]);
    expect(await t.query(`select message_id, attempts from "${t.schema}".inbox_attempts`)).toEqual([{ message_id: 'poison', attempts: 1 }]);
  });

  it('a handler that rewrites message.id and fails has the failure counted against the delivered id', async () => {
    const process = withInbox(
      async (message: InboxMessage) => {
        message.id = 'someone-else';
        throw new Error('boom');
      },
      options({ maxAttempts: 5 }),
    );
    expect(await process({ id: 'mine', payload: {} })).toMatchObject({ messageId: 'mine', status: 'retry', attempt: 1 });
    expect(await t.query(`select message_id, attempts from "${t.schema}".inbox_attempts`)).toEqual([{ message_id: 'mine', attempts: 1 }]);
  });
});

describe('options validated at construction (INVALID_OPTIONS, before anything reaches SQL)', () => {
  const db = { transaction: async () => {} } as never;
  const invalid = expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS });

  it.each([
    ['undefined', undefined],
    ['a string', 'handler'],
    ['an object', {}],
  ])('a handler that is %s', (_label, handler) => {
    expect(() => withInbox(handler as never, { db, consumer: 'c' })).toThrowError(invalid);
    expect(() => withInboxBatch(handler as never, { db, consumer: 'c' })).toThrowError(invalid);
  });

  it.each([
    ['a consumer with NUL', { consumer: 'billing\u0000' }],
    ['a consumer with a lone surrogate', { consumer: 'billing\uD800' }],
    ['an isolationLevel that is not one of the four SQL levels', { isolationLevel: 'serializable; drop table inbox' }],
    ['a lockTimeoutMs beyond PostgreSQL range', { lockTimeoutMs: 2 ** 31 }],
    ['a lockTimeoutMs of 0', { lockTimeoutMs: 0 }],
    ['a maxAttempts beyond integer range', { maxAttempts: 2 ** 31 }],
    ['a NaN backoff', { backoff: { baseDelayMs: Number.NaN } }],
    ['an unknown jitter', { backoff: { jitter: 'lots' } }],
    [
      'a backoff getter that throws',
      {
        backoff: {
          get baseDelayMs() {
            throw new Error('x');
          },
        },
      },
    ],
    ['an unknown fingerprint mode', { fingerprint: 'md5' }],
    ['an unknown onPayloadMismatch', { onPayloadMismatch: 'ignore' }],
    ['a parse that is not a function', { parse: 'zod' }],
  ])('%s', (_label, extra) => {
    const build = () => withInbox(async () => {}, { db, consumer: 'c', ...extra } as never);
    expect(build).toThrowError(expect.objectContaining({ code: expect.stringMatching(/^INVALID_OPTIONS$/) }));
  });
});
