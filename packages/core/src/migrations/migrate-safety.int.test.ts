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

describe('migrate() edges (node-postgres)', () => {
  it('migrate(db) through search_path and migrate(db, { schema }) at once on the same tables: both succeed', async () => {
    const t = await createTestDatabase('node-postgres', { poolSize: 4 });
    const { default: pg } = await import('pg');
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const { databaseUrl } = await import('@inboxed/test-support');
    const schemas: string[] = [];
    try {
      for (let round = 0; round < 5; round++) {
        const schema = uniqueName('sp');
        schemas.push(schema);
        await t.query(`create schema "${schema}"`);
        const implicit = new pg.Pool({ connectionString: databaseUrl(), max: 2, options: `-c search_path=${schema}` });
        try {
          const results = await Promise.allSettled([migrate(drizzle(implicit) as never), migrate(t.db, { schema })]);
          expect(results.map((result) => result.status)).toEqual(['fulfilled', 'fulfilled']);
        } finally {
          await implicit.end();
        }
      }
    } finally {
      for (const schema of schemas) await t.query(`drop schema if exists "${schema}" cascade`);
      await t.close();
    }
  });

  it('an upgrade waiting on an open transaction fails after lockTimeoutMs, applies nothing, and succeeds when run again', async () => {
    const t = await createTestDatabase('node-postgres', { poolSize: 4 });
    const schema = uniqueName('lock');
    const { default: pg } = await import('pg');
    const { databaseUrl } = await import('@inboxed/test-support');
    const holder = new pg.Client({ connectionString: databaseUrl() });
    await holder.connect();
    try {
      // Version 1 only, as an old install would have it.
      await t.query(`create schema "${schema}"`);
      for (const statement of migrations[0]!.statements(
        { schema, table: 'inbox', attemptsTable: 'inbox_attempts', deadLettersTable: 'inbox_dead_letters', auditTable: 'inbox_audit' },
        {},
      ))
        await t.query(statement);
      await t.query(
        `create table "${schema}".inbox_migrations (version integer primary key, name text not null, applied_at timestamptz default now() not null)`,
      );
      await t.query(`insert into "${schema}".inbox_migrations (version, name) values (1, '${migrations[0]!.name}')`);
      // A consumer's transaction holding the inbox.
      await holder.query('begin');
      await holder.query(`insert into "${schema}".inbox (consumer, message_id, status) values ('c', 'm', 'processed')`);
      const started = Date.now();
      await expect(migrate(t.db, { schema }, { lockTimeoutMs: 300 })).rejects.toMatchObject({
        code: InboxErrorCodes.MIGRATION_FAILED,
        message: expect.stringContaining('lockTimeoutMs (300 ms)'),
      });
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(await t.query(`select version from "${schema}".inbox_migrations order by 1`)).toEqual([{ version: 1 }]);
      await holder.query('commit');
      expect((await migrate(t.db, { schema }, { lockTimeoutMs: 300 })).applied.length).toBe(migrations.length - 1);
    } finally {
      await holder.end();
      await t.query(`drop schema if exists "${schema}" cascade`);
      await t.close();
    }
  });

  it('refuses a table name whose derived index names PostgreSQL would cut short', async () => {
    const t = await createTestDatabase('node-postgres');
    try {
      await expect(migrate(t.db, { schema: t.schema, table: `t${'x'.repeat(38)}` })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_IDENTIFIER });
      const longest = `t${'x'.repeat(37)}`;
      await migrate(t.db, { schema: t.schema, table: longest });
      const indexes = await t.query(`select indexname from pg_indexes where schemaname = '${t.schema}' and tablename = '${longest}_dead_letters' order by 1`);
      expect(indexes).toHaveLength(3);
    } finally {
      await t.close();
    }
  });
});
