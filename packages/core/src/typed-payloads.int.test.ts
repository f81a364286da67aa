import { type } from 'arktype';
import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import * as v from 'valibot';
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import type { StandardSchemaV1 } from './standard-schema.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

interface Order {
  id: string;
  amountCents: number;
}

/** A Standard Schema written by hand, the way validator libraries implement it: coerces amountCents from a string. */
const OrderSchema: StandardSchemaV1<unknown, Order> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate(value) {
      const input = value as { id?: unknown; amountCents?: unknown } | null;
      const issues: StandardSchemaV1.Issue[] = [];
      if (typeof input?.id !== 'string') issues.push({ message: 'expected a string', path: ['id'] });
      const amount = typeof input?.amountCents === 'string' ? Number(input.amountCents) : input?.amountCents;
      if (typeof amount !== 'number' || !Number.isInteger(amount)) issues.push({ message: 'expected an integer', path: [{ key: 'amountCents' }] });
      return issues.length > 0 ? { issues } : { value: { id: input!.id as string, amountCents: amount as number } };
    },
  },
};

/** The same, validating asynchronously (Standard Schema allows a Promise). */
const AsyncOrderSchema: StandardSchemaV1<unknown, Order> = {
  '~standard': { ...OrderSchema['~standard'], validate: async (value) => OrderSchema['~standard'].validate(value) },
};

describe.each(DRIVERS)('typed payloads (schema option) on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  it.each([
    ['synchronous', OrderSchema],
    ['asynchronous', AsyncOrderSchema],
  ])('a %s Standard Schema validates before the claim, and the handler gets its output', async (_label, schema) => {
    const seen: Order[] = [];
    const process = withInbox(
      async (message, tx: any) => {
        seen.push(message.payload);
        await tx.insert(t.effects).values({ messageId: message.id, amount: message.payload.amountCents });
      },
      { ...database.options(), schema },
    );
    expect(await process({ id: 'ok', payload: { id: 'o-1', amountCents: '1299' } })).toMatchObject({ status: 'processed' });
    expect(seen).toEqual([{ id: 'o-1', amountCents: 1299 }]);
    // The fingerprint is the payload as delivered: the same delivery again is a duplicate.
    expect(await process({ id: 'ok', payload: { id: 'o-1', amountCents: '1299' } })).toMatchObject({ status: 'duplicate' });

    const invalid = await process({ id: 'bad', payload: { amountCents: 12.5 } });
    expect(invalid).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
    expect(invalid.error?.code).toBe(InboxErrorCodes.VALIDATION_FAILED);
    expect(invalid.error?.message).toBe('payload failed validation: id: expected a string; amountCents: expected an integer');
    expect(invalid.error?.details.issues).toEqual([
      { path: 'id', message: 'expected a string' },
      { path: 'amountCents', message: 'expected an integer' },
    ]);
    expect(await t.query(`select message_id from "${t.schema}".inbox order by 1`)).toEqual([{ message_id: 'ok' }]);
    expect(await t.query(`select * from "${t.schema}".inbox_attempts`)).toEqual([]);
  });

  it('withInboxBatch validates each message; invalid ones are dead-lettered, the rest reach the handler typed', async () => {
    const handled: string[] = [];
    const process = withInboxBatch(
      async (messages) => {
        for (const m of messages) handled.push(`${m.payload.id}:${m.payload.amountCents}`);
      },
      { ...database.options(), schema: OrderSchema },
    );
    const outcomes = await process([
      { id: 'a', payload: { id: 'a', amountCents: 1 } },
      { id: 'b', payload: { id: 'b' } },
      { id: 'c', payload: { id: 'c', amountCents: '3' } },
    ]);
    expect(outcomes.map((o) => [o.messageId, o.status])).toEqual([
      ['a', 'processed'],
      ['b', 'dead-letter'],
      ['c', 'processed'],
    ]);
    expect(handled).toEqual(['a:1', 'c:3']);
  });

  it('a validator that throws dead-letters the message as validation-failed; the processor resolves', async () => {
    const throwing: StandardSchemaV1<unknown, Order> = {
      '~standard': {
        version: 1,
        vendor: 'test',
        validate: () => {
          throw new Error('validator bug');
        },
      },
    };
    const outcome = await withInbox(async () => {}, { ...database.options(), schema: throwing })({ id: 'x', payload: {} });
    expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
  });
});

describe('the schema option at construction', () => {
  const db = { transaction: async () => {} } as never;
  it('refuses a value that is not a Standard Schema, and schema together with parse', () => {
    const invalid = expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS });
    expect(() => withInbox(async () => {}, { db, consumer: 'c', schema: { parse: () => 1 } as never })).toThrowError(invalid);
    expect(() => withInbox(async () => {}, { db, consumer: 'c', schema: OrderSchema, parse: (v: unknown) => v as Order })).toThrowError(invalid);
  });
});

describe('real Standard Schema libraries', () => {
  const database = useMigratedDatabase('pglite');
  const zodOrder = z.object({ id: z.string(), amountCents: z.coerce.number().int() });
  const valibotOrder = v.object({ id: v.string(), amountCents: v.pipe(v.union([v.string(), v.number()]), v.transform(Number), v.integer()) });
  const arktypeOrder = type({ id: 'string', amountCents: 'string.integer.parse | number.integer' });

  it.each([
    ['zod', zodOrder],
    ['valibot', valibotOrder],
    ['arktype', arktypeOrder],
  ] as const)('%s: valid payloads reach the handler as the schema output; invalid ones are dead-lettered with issues', async (_label, schema) => {
    const seen: Order[] = [];
    const process = withInbox(
      async (message) => {
        seen.push({ id: message.payload.id, amountCents: message.payload.amountCents });
      },
      { ...database.options(), schema },
    );
    expect(await process({ id: 'ok', payload: { id: 'o-1', amountCents: '1299' } })).toMatchObject({ status: 'processed' });
    expect(seen).toEqual([{ id: 'o-1', amountCents: 1299 }]);
    const invalid = await process({ id: 'bad', payload: { amountCents: 'x' } });
    expect(invalid).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
    expect(invalid.error?.details.issues).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'id' })]));
  });

  it("zod's parse is accepted as the parse option, as is", async () => {
    const process = withInbox(async (message) => void message.payload.amountCents.toFixed(), { ...database.options(), parse: zodOrder.parse });
    expect(await process({ id: 'p', payload: { id: 'o-2', amountCents: 5 } })).toMatchObject({ status: 'processed' });
    expect(await process({ id: 'q', payload: { id: 2 } })).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
  });
});
