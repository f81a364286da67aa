import { readFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { generateDrizzleJson, generateMigration } from 'drizzle-kit/api';
import { pgSchema, text } from 'drizzle-orm/pg-core';
import { drizzle } from 'drizzle-orm/pglite';
import { describe, expect, it } from 'vitest';
import { InboxErrorCodes } from '../errors.js';
import { createInboxTables, resolveTableNames } from '../schema.js';
import { migrationFiles } from './files.js';
import { migrate } from './migrate.js';
import { migrations } from './migrations.js';

const normalise = (statement: string) =>
  statement
    .replace(/IF NOT EXISTS /g, '')
    .replace(/;\s*$/, '')
    .trim();

describe('migrations', () => {
  it.each([[{}], [{ schema: 'messaging', table: 'orders_inbox' }]])('match what drizzle-kit generates from createInboxTables(%j)', async (names) => {
    // Everything createInboxTables returns is exported from the schema file, inboxSchema included.
    const generated = await generateMigration(generateDrizzleJson({}), generateDrizzleJson({ ...createInboxTables(names) }));
    const resolved = resolveTableNames(names);
    // migrate() creates the schema itself (CREATE SCHEMA IF NOT EXISTS, before its lock-protected
    // history table); drizzle-kit emits it as the first statement, because inboxSchema is exported.
    const createSchema = resolved.schema === undefined ? [] : [`CREATE SCHEMA "${resolved.schema}"`];
    const ours = [...createSchema, ...migrations.flatMap((m) => m.statements(resolved))];
    expect(ours.map(normalise)).toEqual(generated.map(normalise));
  });

  it('createInboxTables() returns the PgSchema drizzle-kit needs to emit CREATE SCHEMA, only for a named schema', () => {
    const named = createInboxTables({ schema: 'messaging' });
    expect(named.inboxSchema.schemaName).toBe('messaging');
    expect(Object.keys(named).sort()).toEqual(['inbox', 'inboxAttempts', 'inboxSchema']);
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
    expect(results.map((r) => r.applied).sort()).toEqual([[], [1]]);
    expect(await migrate(db, { schema: 'one' })).toEqual({ applied: [], version: 1 });
    await expect(migrate(db)).resolves.toEqual({ applied: [1], version: 1 });
  });

  it.each(['in box', 'inbox;drop table x', '1inbox', '', 'a'.repeat(64), 'x"y'])('rejects the identifier %j', async (bad) => {
    expect(() => createInboxTables({ table: bad })).toThrowError(expect.objectContaining({ code: InboxErrorCodes.INVALID_IDENTIFIER }));
    expect(() => createInboxTables({ schema: bad })).toThrowError(expect.objectContaining({ code: InboxErrorCodes.INVALID_IDENTIFIER }));
    await expect(migrate(drizzle(new PGlite()), { table: bad })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_IDENTIFIER });
  });
});
