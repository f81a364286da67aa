import { sql } from 'drizzle-orm';
import { migrations } from '../migrations/migrations.js';
import type { InboxTableNames } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';
import { adminOperation, adminTables, rowsOf } from './admin-sql.js';

/** A migration `migrate()` would apply. */
export interface PendingMigration {
  version: number;
  name: string;
}

/**
 * The migrations `migrate(db, names)` has not applied yet (read from `<table>_migrations`), oldest
 * first; all of them when the history table does not exist. Changes nothing: the CLI's
 * `migrate --check`. Tables adopted from drizzle-kit count as pending until `migrate()` records them.
 */
export async function pendingMigrations(db: AnyPgDatabase, names: InboxTableNames = {}): Promise<PendingMigration[]> {
  const tables = adminTables(names);
  const { schema, table } = tables.resolved;
  const history = schema === undefined ? `"${table}_migrations"` : `"${schema}"."${table}_migrations"`;
  return adminOperation('migrate --check', db, tables.resolved, async () => {
    const [found] = await rowsOf<{ exists: boolean }>(db, sql`select to_regclass(${history}) is not null as exists`);
    const applied = new Set<number>();
    if (found?.exists === true) {
      for (const row of await rowsOf<{ version: number }>(db, sql`select version from ${sql.raw(history)}`)) applied.add(Number(row.version));
    }
    return migrations.filter((m) => !applied.has(m.version)).map((m) => ({ version: m.version, name: m.name }));
  });
}
