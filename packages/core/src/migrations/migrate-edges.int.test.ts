// migrate()'s edge cases, on node-postgres only: concurrent callers, a bounded lock wait, long names.
import { createTestDatabase, DRIVERS, uniqueName } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { InboxErrorCodes } from '../errors.js';
import { rowsIn } from '../query-rows.js';
import { migrate } from './migrate.js';
import { migrations } from './migrations.js';

describe.each(['node-postgres', 'postgres-js'] as const)('migrate() run again on %s', (driver) => {
  it('says nothing: no "already exists, skipping" notice reaches the client (postgres-js prints them by default)', async () => {
    const t = await createTestDatabase(driver, { poolSize: 2 });
    const schema = uniqueName('quiet');
    try {
      for (let run = 0; run < 3; run++) await migrate(t.db, { schema });
      expect(t.notices).toEqual([]);
    } finally {
      await t.query(`drop schema if exists "${schema}" cascade`);
      await t.close();
    }
  });
});

describe.each(DRIVERS)("migrate() inside the caller's transaction on %s", (driver) => {
  it("leaves the caller's later statements the client_min_messages and lock_timeout they had", async () => {
    // Given a transaction, migrate() runs in a savepoint, and a local setting outlives it.
    const t = await createTestDatabase(driver, { poolSize: 1 });
    const schema = uniqueName('mtx');
    const setting = async (tx: any, name: string) => Object.values(rowsIn<Record<string, string>>(await tx.execute(sql.raw(`show ${name}`)))[0]!)[0];
    try {
      const seen = await t.db.transaction(async (tx: any) => {
        await tx.execute(sql`set local lock_timeout = '1234ms'`);
        await migrate(tx, { schema });
        return [await setting(tx, 'client_min_messages'), await setting(tx, 'lock_timeout')];
      });
      expect(seen).toEqual(['notice', '1234ms']);
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
