import { PGlite } from '@electric-sql/pglite';
import { generateDrizzleJson, generateMigration } from 'drizzle-kit/api';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/pglite';
import { describe, expect, it, vi } from 'vitest';
import { createInboxTables, type InboxTableNames } from '../schema.js';
import { inspectInboxTables } from './inspect.js';
import { migrate } from './migrate.js';
import { migrations } from './migrations.js';

// drizzle-kit's generator and fresh PGlite databases are CPU work: a test takes 10-20 s alone and
// took over 30 s when two test runs shared the 2 cores. The slack is for a loaded machine, not a hang.
vi.setConfig({ testTimeout: 90_000 });

const ALL = migrations.map((m) => m.version);
const LATEST = ALL[ALL.length - 1]!;

// The two ways to own the inbox tables, run one after the other on one database, in both orders.
// The real CLIs run the same scenarios from packed tarballs in test/package/drizzle-kit.test.ts.

/** The statements `drizzle-kit generate` writes for a schema file exporting createInboxTables(names). */
async function drizzleKitStatements(names: InboxTableNames): Promise<string[]> {
  return generateMigration(generateDrizzleJson({}), generateDrizzleJson({ ...createInboxTables(names) }));
}

/** The documented edit that lets a generated migration adopt tables `migrate()` already created. */
function ifNotExists(statement: string): string {
  return statement.replace(/^CREATE (SCHEMA|TABLE|INDEX) (?!IF NOT EXISTS)/, 'CREATE $1 IF NOT EXISTS ');
}

async function run(db: ReturnType<typeof drizzle>, statements: string[]): Promise<void> {
  await db.transaction(async (tx) => {
    for (const statement of statements) await tx.execute(sql.raw(statement));
  });
}

describe.each<[string, InboxTableNames]>([
  ['public.inbox', {}],
  ['messaging.orders_inbox', { schema: 'messaging', table: 'orders_inbox' }],
])('drizzle-kit and migrate() on %s', (_label, names) => {
  it('migrate() after drizzle-kit adopts its tables and records every version', async () => {
    const db = drizzle(new PGlite());
    await run(db, await drizzleKitStatements(names));
    await expect(migrate(db, names)).resolves.toEqual({ applied: ALL, version: LATEST });
    await expect(migrate(db, names)).resolves.toEqual({ applied: [], version: LATEST });
    expect(await inspectInboxTables(db, createInboxTables(names))).toEqual([]);
  });

  it('a drizzle-kit migration after migrate() fails on the existing objects, and applies once edited to IF NOT EXISTS', async () => {
    const db = drizzle(new PGlite());
    await migrate(db, names);
    const generated = await drizzleKitStatements(names);
    // Unedited, the first CREATE fails and the whole migration rolls back (drizzle-kit migrate runs
    // its pending migrations in one transaction too), leaving migrate()'s tables as they were.
    const failure = await run(db, generated).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(String((failure as { cause?: Error })?.cause?.message)).toMatch(
      names.schema === undefined ? /relation "inbox(_attempts)?" already exists/ : /schema "messaging" already exists/,
    );
    await run(db, generated.map(ifNotExists));
    expect(await inspectInboxTables(db, createInboxTables(names))).toEqual([]);
    await expect(migrate(db, names)).resolves.toEqual({ applied: [], version: LATEST });
  });
});
