import { DRIVERS, createTestDatabase, uniqueName, type TestDatabase } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InboxErrorCodes } from '../errors.js';
import { migrate } from './migrate.js';
import { migrations } from './migrations.js';

describe.each(DRIVERS)('migrate() refuses inbox tables it cannot use, on %s', (driver) => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase(driver);
  });
  afterEach(async () => {
    await t.close();
  });

  const refused = expect.objectContaining({ code: InboxErrorCodes.MIGRATION_FAILED, message: expect.stringMatching(/\(consumer, message_id\)/) });
  const attempts = `create table "${'$S'}".inbox_attempts (consumer text not null, message_id text not null, attempts integer not null,
    first_attempt_at timestamptz not null default now(), last_attempt_at timestamptz not null default now(), last_error text, last_error_code text,
    primary key (consumer, message_id))`;
  const inboxWith = (key: string) => `create table "${'$S'}".inbox (consumer text not null, message_id text not null, fingerprint text,
    status text not null, reason text, source text, received_at timestamptz not null default now(), completed_at timestamptz not null default now()${key})`;
  const run = async (...statements: string[]) => {
    for (const statement of statements) await t.query(statement.replaceAll('$S', t.schema));
  };

  it.each([
    ['no key at all', ''],
    ['a key on message_id alone', ', primary key (message_id)'],
    ['a key on (consumer, message_id, status)', ', unique (consumer, message_id, status)'],
    ['a deferrable key (ON CONFLICT cannot use it)', ', unique (consumer, message_id) deferrable initially deferred'],
  ])('an existing inbox table with %s', async (_label, key) => {
    await run(inboxWith(key), attempts);
    await expect(migrate(t.db, { schema: t.schema })).rejects.toThrowError(refused);
  });

  it('an existing inbox with a partial unique index on the pair', async () => {
    await run(inboxWith(''), attempts, `create unique index partial_key on "$S".inbox (consumer, message_id) where status = 'processed'`);
    await expect(migrate(t.db, { schema: t.schema })).rejects.toThrowError(refused);
  });

  it('an existing attempts table without its key (its upsert would fail on every handler failure)', async () => {
    await run(inboxWith(', primary key (consumer, message_id)'), attempts.replace(',\n    primary key (consumer, message_id))', ')'));
    await expect(migrate(t.db, { schema: t.schema })).rejects.toThrowError(
      expect.objectContaining({ code: InboxErrorCodes.MIGRATION_FAILED, message: expect.stringMatching(/inbox_attempts/) }),
    );
  });

  it('an existing inbox lacking a column', async () => {
    await run(inboxWith(', primary key (consumer, message_id)').replace('fingerprint text,', ''), attempts);
    await expect(migrate(t.db, { schema: t.schema })).rejects.toThrowError(
      expect.objectContaining({ code: InboxErrorCodes.MIGRATION_FAILED, message: expect.stringMatching(/fingerprint/) }),
    );
  });

  it('accepts tables created by hand with the same shape, with a unique constraint instead of the primary key', async () => {
    await run(inboxWith(', unique (message_id, consumer)'), attempts);
    await expect(migrate(t.db, { schema: t.schema })).resolves.toEqual({ applied: migrations.map((m) => m.version), version: migrations.length });
  });
});

describe.each(DRIVERS.filter((d) => d !== 'pglite'))('migrate() from several processes, on %s', (driver) => {
  it('different tables into one new schema at once: no race creating the schema', async () => {
    const t = await createTestDatabase(driver, { poolSize: 8 });
    const schema = uniqueName('fresh');
    try {
      const results = await Promise.all(Array.from({ length: 6 }, (_, i) => migrate(t.db, { schema, table: `inbox_${i}` })));
      expect(results.every((r) => r.version === migrations.length)).toBe(true);
      const tables = await t.query<{ n: number }>(`select count(*)::int as n from information_schema.tables where table_schema = '${schema}'`);
      expect(tables).toEqual([{ n: 30 }]); // inbox, attempts, dead letters, audit and history per table
    } finally {
      await t.query(`drop schema if exists "${schema}" cascade`);
      await t.close();
    }
  });
});
