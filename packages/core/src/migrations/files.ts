import { resolveTableNames } from '../schema.js';
import { migrations, renderMigrationSql } from './migrations.js';

/** @internal The plain-SQL migration files shipped in `migrations/`, rendered with default names. */
export function migrationFiles(): { name: string; sql: string }[] {
  const names = resolveTableNames();
  return migrations.map((m) => ({ name: `${String(m.version).padStart(4, '0')}_${m.name}.sql`, sql: renderMigrationSql(m, names) }));
}
