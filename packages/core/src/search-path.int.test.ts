import { PGlite } from '@electric-sql/pglite';
import { createTestDatabase, DRIVERS, databaseUrl, postgres, type TestDatabase } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { migrate } from './migrations/migrate.js';
import { reject, type InboxMessage } from './types.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

// Schema-per-tenant applications switch search_path inside their transactions. The inbox's own
// statements after the handler (rejection, completion check) must still find the default,
// unqualified `inbox` table where the claim found it.
const connect = {
  'node-postgres': (schema: string) => {
    const pool = new pg.Pool({ connectionString: databaseUrl(), options: `-c search_path=${schema}` });
    return { db: drizzleNodePg(pool), end: () => pool.end() };
  },
  'postgres-js': (schema: string) => {
    const client = postgres(databaseUrl(), { connection: { search_path: schema }, onnotice: () => {} });
    return { db: drizzlePostgresJs(client), end: () => client.end({ timeout: 5 }) };
  },
  pglite: (schema: string) => {
    const client = new PGlite();
    const db = drizzlePglite(client);
    return {
      db,
      end: () => client.close(),
      setup: async () => {
        await db.execute(sql.raw(`create schema "${schema}"`));
        await db.execute(sql.raw(`set search_path to "${schema}"`));
      },
    };
  },
} as const;

describe.each(DRIVERS)('a handler that changes search_path, on %s', (driver) => {
  let t: TestDatabase;
  let target: { db: any; end(): Promise<unknown>; setup?: () => Promise<unknown> };
  beforeEach(async () => {
    t = await createTestDatabase(driver === 'pglite' ? 'node-postgres' : driver);
    target = connect[driver](t.schema);
    await target.setup?.();
    await migrate(target.db); // default, unqualified names: lands in the connection's search_path
    await target.db.execute(
      sql.raw(`create table if not exists "${t.schema}".effects (id bigserial primary key, message_id text not null, value jsonb, amount integer)`),
    );
  });
  afterEach(async () => {
    await target.end();
    await t.close();
  });

  const tenantSwitch = async (message: InboxMessage, tx: any) => {
    await tx.execute(sql.raw(`insert into effects (message_id) values ('${message.id}')`));
    await tx.execute(sql`set local search_path to pg_catalog`);
  };

  it('is still processed, rejected and deduplicated against the inbox the claim used', async () => {
    const process = withInbox(tenantSwitch, { db: target.db, consumer: 'c' });
    expect(await process({ id: 'a', payload: 1 })).toMatchObject({ status: 'processed' });
    expect(await process({ id: 'a', payload: 1 })).toMatchObject({ status: 'duplicate' });
    const rejecting = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tenantSwitch(message, tx);
        return reject('no');
      },
      { db: target.db, consumer: 'r' },
    );
    expect(await rejecting({ id: 'b', payload: 1 })).toMatchObject({ status: 'rejected', reason: 'no' });
    const batch = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        for (const m of messages) await tenantSwitch(m, tx);
      },
      { db: target.db, consumer: 'b' },
    );
    expect(
      (
        await batch([
          { id: 'c', payload: 1 },
          { id: 'd', payload: 1 },
        ])
      ).map((o) => o.status),
    ).toEqual(['processed', 'processed']);
    const rows = (await target.db.execute(sql.raw(`select consumer, message_id, status from "${t.schema}".inbox order by 1, 2`))) as any;
    expect(Array.isArray(rows) ? rows : rows.rows).toEqual([
      { consumer: 'b', message_id: 'c', status: 'processed' },
      { consumer: 'b', message_id: 'd', status: 'processed' },
      { consumer: 'c', message_id: 'a', status: 'processed' },
      { consumer: 'r', message_id: 'b', status: 'rejected' },
    ]);
  });
});
