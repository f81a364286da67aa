/**
 * Renders the migrations of src/migrations/migrations.ts, with the default names (public.inbox),
 * into migrations/*.sql for users who apply plain SQL with their own tool. A unit test fails when
 * the files and the code disagree, so run `pnpm --filter @inboxed/core migrations:write` after
 * adding a migration.
 */
import { writeFileSync } from 'node:fs';
import { migrationFiles } from '../src/migrations/files.js';

for (const file of migrationFiles()) {
  writeFileSync(new URL(`../migrations/${file.name}`, import.meta.url), file.sql);
  console.log(`wrote migrations/${file.name}`);
}
