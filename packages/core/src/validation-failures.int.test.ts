// A validator (`schema`, `parse`) that misbehaves ends the message as a validation failure with its
// reason, never as an internal error retried for ever, and never hangs the delivery.
import { describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import type { StandardSchemaV1 } from './standard-schema.js';
import { withInbox } from './with-inbox.js';

const schemaReturning = (result: () => unknown): StandardSchemaV1<unknown, unknown> => ({
  '~standard': { version: 1, vendor: 'test', validate: () => result() as StandardSchemaV1.Result<unknown> },
});
const fails = () => {
  throw new Error('unreadable');
};

describe('validators that misbehave', () => {
  const database = useMigratedDatabase('node-postgres');
  const handler = async (message: { id: string }, tx: unknown) => {
    await (tx as any).insert(database.t.effects).values({ messageId: message.id });
  };
  const rows = async () => {
    const { t } = database;
    const [row] = await t.query<{ inbox: number; attempts: number; effects: number }>(
      `select (select count(*)::int from "${t.schema}".inbox) as inbox,
              (select count(*)::int from "${t.schema}".inbox_attempts) as attempts,
              (select count(*)::int from "${t.schema}".effects) as effects`,
    );
    return row;
  };

  it.each([
    ['undefined (a validator that forgot to return)', () => undefined],
    ['null', () => null],
    ['a promise of undefined', () => Promise.resolve(undefined)],
    ['issues that are not an array', () => ({ issues: 5 })],
    [
      'an issues getter that throws',
      () => ({
        get issues(): never {
          return fails();
        },
      }),
    ],
    [
      'a value getter that throws',
      () => ({
        issues: undefined,
        get value(): never {
          return fails();
        },
      }),
    ],
  ])('a schema whose validate() returns %s dead-letters the message as validation-failed', async (_label, result) => {
    const process = withInbox(handler as never, { ...database.options({ maxAttempts: 3 }), schema: schemaReturning(result) });
    const outcome = await process({ id: 'm1', payload: { a: 1 } });
    expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'validation-failed', error: { code: 'VALIDATION_FAILED' } });
    expect(await rows()).toEqual({ inbox: 0, attempts: 0, effects: 0 });
  });

  it('issues that cannot be read are reported as unreadable, still a validation failure', async () => {
    const issues = [null, { message: { toString: fails } }, { message: 'bad path', path: 'a.b' }, { message: 'fine', path: ['items', { key: 0 }] }];
    const process = withInbox(handler as never, { ...database.options(), schema: schemaReturning(() => ({ issues })) });
    const outcome = await process({ id: 'm1', payload: {} });
    expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
    expect(outcome.error?.details).toMatchObject({
      issues: [
        { path: '', message: 'an issue that cannot be read' },
        { path: '', message: 'an issue that cannot be read' },
        { path: '', message: 'bad path' },
        { path: 'items.0', message: 'fine' },
      ],
    });
  });

  it.each([
    ['schema validate()', { schema: schemaReturning(() => new Promise(() => {})) }],
    ['parse', { parse: () => new Promise(() => {}) }],
  ])('a %s that never settles is bounded by handlerTimeoutMs: dead-lettered, the handler never runs', async (_label, validator) => {
    const process = withInbox(handler as never, { ...database.options({ handlerTimeoutMs: 200 }), ...validator });
    const outcome = await process({ id: 'm1', payload: {} });
    expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'validation-failed' });
    expect(outcome.error?.message).toContain('did not settle within handlerTimeoutMs (200 ms)');
    expect(await rows()).toEqual({ inbox: 0, attempts: 0, effects: 0 });
  });
});
