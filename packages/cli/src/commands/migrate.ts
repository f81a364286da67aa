import { type AnyPgDatabase, InboxErrorCodes, type InboxTableNames, isInboxError, migrate, withInbox } from '@inboxed/core';
import { type PendingMigration, pendingMigrations } from '@inboxed/core/admin';
import { sql } from 'drizzle-orm';
import type { CommandContext } from '../context.js';
import { ExitCodes } from '../exit-codes.js';
import type { CommandOutput } from '../output.js';

/**
 * `inboxed migrate [--check]`: applies pending migrations, or (`--check`) lists them and exits 1 when
 * there are any. Tables without inboxed's history (`<table>_migrations`) are managed outside inboxed
 * (drizzle-kit, or the plain SQL files): `--check` then checks the tables themselves instead, and never
 * advises `inboxed migrate`, which would give them a second owner.
 */
export async function migrateCommand(context: CommandContext, options: { check?: boolean }): Promise<CommandOutput> {
  if (options.check === true) return checkMigrations(context);
  const result = await migrate(context.db, context.names);
  const text =
    result.applied.length === 0
      ? `Up to date: schema version ${result.version}.`
      : `Applied migration${result.applied.length === 1 ? '' : 's'} ${result.applied.join(', ')}; schema version ${result.version}.`;
  return { exitCode: ExitCodes.OK, json: result, text };
}

const versionName = (m: PendingMigration) => `${String(m.version).padStart(4, '0')}_${m.name}`;

async function checkMigrations(context: CommandContext): Promise<CommandOutput> {
  const pending = await pendingMigrations(context.db, context.names);
  if (pending.length === 0) {
    return { exitCode: ExitCodes.OK, json: { upToDate: true, managedOutsideInboxed: false, pending: [] }, text: 'Up to date: no pending migrations.' };
  }
  const found = await existingTables(context.db, context.names);
  if (found.history || !found.inbox) {
    return {
      exitCode: ExitCodes.CHECK_FAILED,
      json: { upToDate: false, managedOutsideInboxed: false, pending },
      text: ['Pending migrations (run `inboxed migrate`):', ...pending.map((m) => `  ${versionName(m)}`)].join('\n'),
    };
  }
  // The inbox table exists and inboxed never migrated it: drizzle-kit (or the plain SQL) owns the tables.
  const problems = await tableProblems(context.db, context.names);
  const latest = pending.at(-1)!;
  if (problems.length === 0) {
    return {
      exitCode: ExitCodes.OK,
      json: { upToDate: true, managedOutsideInboxed: true, pending: [] },
      text: [
        `Up to date, managed outside inboxed: ${found.inboxName} and its tables have every table, column and key of schema version ${latest.version} (${versionName(latest)}),`,
        `but no ${found.historyName}: drizzle-kit or your own SQL created them. Nothing to apply; do not run \`inboxed migrate\` on them`,
        'unless inboxed is to own them from now on (it adopts them; then stop exporting them from your Drizzle schema).',
      ].join('\n'),
    };
  }
  return {
    exitCode: ExitCodes.CHECK_FAILED,
    json: { upToDate: false, managedOutsideInboxed: true, pending, problems },
    text: [
      `Behind schema version ${latest.version} (${versionName(latest)}), managed outside inboxed: ${found.inboxName} exists without ${found.historyName},`,
      'so drizzle-kit or your own SQL created it, and it is not complete:',
      ...problems.map((problem) => `  ${problem}`),
      'If drizzle-kit owns the tables: export all four from your Drizzle schema, then drizzle-kit generate and migrate (or push).',
      'If you apply the plain SQL files: apply the missing ones. `inboxed migrate` adopts the tables instead, making inboxed their one owner.',
    ].join('\n'),
  };
}

/**
 * Whether the inbox table and inboxed's history table exist, and their names as the messages print
 * them (the names were validated by pendingMigrations: INVALID_IDENTIFIER before any statement).
 */
async function existingTables(db: AnyPgDatabase, names: InboxTableNames) {
  const table = names.table ?? 'inbox';
  const quote = (name: string) => (names.schema === undefined ? `"${name}"` : `"${names.schema}"."${name}"`);
  const inboxName = quote(table);
  const historyName = quote(`${table}_migrations`);
  const result = (await db.execute(
    sql`select to_regclass(${inboxName}) is not null as inbox, to_regclass(${historyName}) is not null as history`,
  )) as unknown as { rows: { inbox: boolean; history: boolean }[] };
  const [row] = result.rows;
  return { inbox: row?.inbox === true, history: row?.history === true, inboxName, historyName };
}

/** What a consumer's start() would refuse in these tables (missing tables, columns or keys); empty when they are usable. */
async function tableProblems(db: AnyPgDatabase, names: InboxTableNames): Promise<string[]> {
  const probe = withInbox(async () => {}, { db, consumer: 'inboxed-cli', tables: names });
  try {
    await probe.checkTables();
    return [];
  } catch (error) {
    if (!isInboxError(error) || error.code !== InboxErrorCodes.INBOX_TABLE_MISSING) throw error;
    const problems = error.details?.problems;
    return Array.isArray(problems) && problems.length > 0 ? problems.map(String) : [error.message];
  }
}
