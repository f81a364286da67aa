import { readFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { generateDrizzleJson, generateMigration } from 'drizzle-kit/api';
import { pgSchema, text } from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/pglite';
import { describe, expect, it, vi } from 'vitest';
import { InboxErrorCodes } from '../errors.js';
import { createInboxTables, resolveTableNames } from '../schema.js';
import { migrationFiles } from './files.js';
import { migrate } from './migrate.js';
import { migrations } from './migrations.js';

// drizzle-kit's generator and fresh PGlite databases are CPU work: a test takes 10-20 s alone and
// took over 30 s when two test runs shared the 2 cores. The slack is for a loaded machine, not a hang.
vi.setConfig({ testTimeout: 90_000 });

const normalise = (statement: string) =>
  statement
    .replace(/IF NOT EXISTS /g, '')
    .replace(/;\s*$/, '')
    .trim();

/** The columns, constraints and indexes of a schema's tables, but the migration history table. */
async function catalogOf(db: ReturnType<typeof drizzle>, schema: string) {
  const rows = async (query: string) => (await db.execute(sql.raw(query))).rows;
  const notHistory = `not like '%\\_migrations'`;
  return {
    columns: await rows(`select table_name, column_name, data_type, is_nullable, column_default from information_schema.columns
      where table_schema = '${schema}' and table_name ${notHistory} order by table_name, column_name`),
    constraints: await rows(`select c.conname, pg_get_constraintdef(c.oid) as definition from pg_constraint c
      join pg_class t on t.oid = c.conrelid where c.connamespace = '${schema}'::regnamespace and t.relname ${notHistory} order by c.conname`),
    indexes: await rows(`select indexname, indexdef from pg_indexes where schemaname = '${schema}' and tablename ${notHistory} order by indexname`),
  };
}

/** Migration 1 as 0.1 shipped it (drizzle-kit's output for 0.1's createInboxTables()). */
const RELEASED_V1 = [
  `CREATE TABLE IF NOT EXISTS "inbox" (
\t"consumer" text NOT NULL,
\t"message_id" text NOT NULL,
\t"fingerprint" text,
\t"status" text NOT NULL,
\t"reason" text,
\t"source" text,
\t"received_at" timestamp with time zone DEFAULT now() NOT NULL,
\t"completed_at" timestamp with time zone DEFAULT now() NOT NULL,
\tCONSTRAINT "inbox_pkey" PRIMARY KEY("consumer","message_id")
)`,
  `CREATE TABLE IF NOT EXISTS "inbox_attempts" (
\t"consumer" text NOT NULL,
\t"message_id" text NOT NULL,
\t"attempts" integer NOT NULL,
\t"first_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
\t"last_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
\t"last_error" text,
\t"last_error_code" text,
\tCONSTRAINT "inbox_attempts_pkey" PRIMARY KEY("consumer","message_id")
)`,
  `CREATE INDEX IF NOT EXISTS "inbox_completed_at_idx" ON "inbox" USING btree ("completed_at")`,
];

const ALL = migrations.map((m) => m.version);
const LATEST = ALL[ALL.length - 1]!;

describe('migrations', () => {
  it.each([[{}], [{ schema: 'messaging', table: 'orders_inbox' }]])(
    'build the same tables, columns, keys and indexes as what drizzle-kit generates from createInboxTables(%j)',
    async (names) => {
      // Everything createInboxTables returns is exported from the schema file, inboxSchema included.
      const generated = await generateMigration(generateDrizzleJson({}), generateDrizzleJson({ ...createInboxTables(names) }));
      const byKit = drizzle(new PGlite());
      for (const statement of generated) await byKit.execute(sql.raw(statement));
      const byUs = drizzle(new PGlite());
      await migrate(byUs, names);
      const schema = resolveTableNames(names).schema ?? 'public';
      expect(await catalogOf(byUs, schema)).toEqual(await catalogOf(byKit, schema));
    },
  );

  it('the first migration is, statement for statement, what drizzle-kit generated for 0.1 (released migrations never change)', async () => {
    const v1 = migrations[0]!.statements(resolveTableNames({}));
    expect(v1.map(normalise)).toEqual(RELEASED_V1.map(normalise));
  });

  it('createInboxTables() returns the PgSchema drizzle-kit needs to emit CREATE SCHEMA, only for a named schema', () => {
    const named = createInboxTables({ schema: 'messaging' });
    expect(named.inboxSchema.schemaName).toBe('messaging');
    expect(Object.keys(named).sort()).toEqual(['inbox', 'inboxAttempts', 'inboxAudit', 'inboxDeadLetters', 'inboxSchema']);
    expect(createInboxTables().inboxSchema).toBeUndefined();
  });

  it('creates the schema once when the app exports its own pgSchema of the same name', async () => {
    const messaging = pgSchema('messaging');
    const payments = messaging.table('payments', { id: text('id').primaryKey() });
    const generated = await generateMigration(
      generateDrizzleJson({}),
      generateDrizzleJson({ messaging, payments, ...createInboxTables({ schema: 'messaging' }) }),
    );
    expect(generated.filter((statement) => statement.startsWith('CREATE SCHEMA'))).toEqual(['CREATE SCHEMA "messaging";\n']);
  });

  it('ship as plain SQL files identical to the code (run migrations:write after adding one)', () => {
    for (const file of migrationFiles()) {
      const shipped = readFileSync(new URL(`../../migrations/${file.name}`, import.meta.url), 'utf8');
      expect(shipped).toBe(file.sql);
    }
  });

  it('migrate() is idempotent, records the version and is safe to run concurrently', async () => {
    const db = drizzle(new PGlite());
    const results = await Promise.all([migrate(db, { schema: 'one' }), migrate(db, { schema: 'one' })]);
    expect(results.map((r) => r.applied).sort()).toEqual([[], ALL]);
    expect(await migrate(db, { schema: 'one' })).toEqual({ applied: [], version: LATEST });
    await expect(migrate(db)).resolves.toEqual({ applied: ALL, version: LATEST });
  });

  it('partitions: 8 creates the inbox hash-partitioned by message_id, keyed across partitions, every later migration applied to it; an existing table is left as it is', async () => {
    const db = drizzle(new PGlite());
    expect(await migrate(db, { schema: 'big' }, { partitions: 8 })).toEqual({ applied: ALL, version: LATEST });
    const rows = async (query: string) => (await db.execute(sql.raw(query))).rows;
    expect(await rows(`select relkind, pg_get_partkeydef(oid) as key from pg_class where oid = 'big.inbox'::regclass`)).toEqual([
      { relkind: 'p', key: 'HASH (message_id)' },
    ]);
    expect(await rows(`select count(*)::int as n from pg_inherits where inhparent = 'big.inbox'::regclass`)).toEqual([{ n: 8 }]);
    // Migration 2's columns and partial index reached every partition.
    expect(
      await rows(
        `select count(*)::int as n from pg_indexes where schemaname = 'big' and tablename like 'inbox_p%' and indexdef like '%WHERE (status = ''processing''%'`,
      ),
    ).toEqual([{ n: 8 }]);
    // The unique key holds across partitions: a second copy of an id conflicts wherever it hashes.
    await db.execute(sql.raw(`insert into big.inbox (consumer, message_id, status) select 'c', 'm-' || g, 'processed' from generate_series(1, 100) g`));
    const again = await db.execute(
      sql.raw(
        `insert into big.inbox (consumer, message_id, status) select 'c', 'm-' || g, 'processed' from generate_series(1, 100) g on conflict do nothing returning 1`,
      ),
    );
    expect(again.rows).toEqual([]);
    expect(await migrate(db, { schema: 'big' }, { partitions: 8 })).toEqual({ applied: [], version: LATEST });
    // Asking for partitions when the table exists converts nothing.
    await migrate(db, { schema: 'plain' });
    await db.execute(sql.raw('delete from plain.inbox_migrations'));
    await migrate(db, { schema: 'plain' }, { partitions: 4 });
    expect(await rows(`select relkind from pg_class where oid = 'plain.inbox'::regclass`)).toEqual([{ relkind: 'r' }]);
  });

  // The refusals below come before any SQL: they share one database (each PGlite costs a second of CPU to boot).
  let refusing: ReturnType<typeof drizzle> | undefined;
  const refusingDb = () => (refusing ??= drizzle(new PGlite()));

  it.each([1, 0, 1025, 2.5, Number.NaN])('rejects partitions: %s', async (partitions) => {
    await expect(migrate(refusingDb(), {}, { partitions })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_OPTIONS });
  });

  it.each(['in box', 'inbox;drop table x', '1inbox', '', 'a'.repeat(64), 'x"y'])('rejects the identifier %j', async (bad) => {
    expect(() => createInboxTables({ table: bad })).toThrowError(expect.objectContaining({ code: InboxErrorCodes.INVALID_IDENTIFIER }));
    expect(() => createInboxTables({ schema: bad })).toThrowError(expect.objectContaining({ code: InboxErrorCodes.INVALID_IDENTIFIER }));
    await expect(migrate(refusingDb(), { table: bad })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_IDENTIFIER });
  });
});
