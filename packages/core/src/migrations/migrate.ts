import { sql } from 'drizzle-orm';
import { unsupportedPostgresJsSetting } from '../drivers/postgres-js.js';
import { integer, pgSchema, pgTable, text } from 'drizzle-orm/pg-core';
import { classifyDatabaseError } from '../database-errors.js';
import { describeError } from '../error-text.js';
import { InboxError, InboxErrorCodes, isInboxError } from '../errors.js';
import { createInboxTables, resolveTableNames, type InboxTableNames, type ResolvedTableNames } from '../schema.js';
import { inspectInboxTables } from './inspect.js';
import { assertSupportedServer } from './server-version.js';
import type { AnyPgDatabase } from '../types.js';
import { rowsOf } from '../query-rows.js';
import { migrations, type TableLayout } from './migrations.js';

/** Options of {@link migrate} beyond the table names. */
export interface MigrateOptions {
  /**
   * Create the inbox table hash-partitioned by `message_id` into this many partitions (2 to 1024),
   * `<table>_p0` to `<table>_p<n-1>`, for very large inboxes: each partition has its own smaller
   * indexes and vacuum. Applies only when this call creates the table; an existing table is never
   * converted (see the README: moving to a partitioned inbox).
   */
  partitions?: number;
  /**
   * How long a migration statement may wait for a lock (`lock_timeout`), in ms. An upgrade that
   * alters the inbox needs an exclusive lock on it, and while it waits behind a consumer's open
   * transaction every new claim queues behind it: bounded, the migration fails instead
   * (`MIGRATION_FAILED`, nothing applied; run it again when the inbox is quieter). Default 10000;
   * `null` waits as long as it takes.
   */
  lockTimeoutMs?: number | null;
}

/** What {@link migrate} did. */
export interface MigrateResult {
  /** Versions applied by this call, in order (empty when already up to date). */
  applied: number[];
  /** The schema version after the call. */
  version: number;
}

function historyTable(names: ResolvedTableNames) {
  const table = (names.schema === undefined ? pgTable : pgSchema(names.schema).table) as typeof pgTable;
  return table(`${names.table}_migrations`, {
    version: integer('version').primaryKey(),
    name: text('name').notNull(),
  });
}

/**
 * Creates or upgrades the inbox tables for users without drizzle-kit. Idempotent and safe to run
 * from several processes at once, for the same or different tables: a transaction-scoped advisory
 * lock per schema serialises concurrent calls, and applied versions are recorded in
 * `<table>_migrations`. Finally it checks the tables it finds (which may predate it): both exist,
 * with inboxed's columns and a usable unique key on `(consumer, message_id)`; otherwise it rolls
 * back and throws `MIGRATION_FAILED` naming what is wrong.
 *
 * Pick one owner for the inbox tables: this function, or drizzle-kit (the tables exported from your
 * Drizzle schema). Tables drizzle-kit created are adopted here (nothing is created twice, the
 * versions are recorded), but the other order fails: drizzle-kit's generated SQL has no
 * `IF NOT EXISTS`, so a migration generated after `migrate()` created the tables stops at
 * `already exists` until its inbox statements are edited to `CREATE ... IF NOT EXISTS`. And
 * `drizzle-kit push` sees `<table>_migrations` as a table to drop unless `tablesFilter` excludes it.
 *
 * ```ts
 * await migrate(db);                                  // public.inbox
 * await migrate(db, { schema: 'messaging' });         // messaging.inbox
 * await migrate(db, {}, { partitions: 16 });          // public.inbox, hash-partitioned by message_id
 * ```
 */
export async function migrate(db: AnyPgDatabase, names: InboxTableNames = {}, options: MigrateOptions = {}): Promise<MigrateResult> {
  const unsupported = unsupportedPostgresJsSetting(db);
  if (unsupported !== undefined) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `db: ${unsupported}`);
  const resolved = resolveTableNames(names);
  const { partitions, lockTimeoutMs = 10_000 } = options;
  if (lockTimeoutMs !== null && (!Number.isInteger(lockTimeoutMs) || lockTimeoutMs < 1 || lockTimeoutMs > 2_147_483_647)) {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `lockTimeoutMs must be an integer of milliseconds >= 1, or null (got ${String(lockTimeoutMs)})`);
  }
  if (partitions !== undefined && (!Number.isInteger(partitions) || partitions < 2 || partitions > 1024)) {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `partitions must be an integer from 2 to 1024 (got ${String(partitions)})`);
  }
  const inboxName = resolved.schema === undefined ? `"${resolved.table}"` : `"${resolved.schema}"."${resolved.table}"`;
  const history = historyTable(resolved);
  const latest = migrations[migrations.length - 1]?.version ?? 0;
  try {
    return await db.transaction(async (tx) => {
      // One lock per schema, taken before CREATE SCHEMA: processes migrating different inbox tables
      // into the same new schema at once would otherwise race on creating it (duplicate key on
      // pg_namespace). The schema is the one the tables go to: without a name, the first schema of
      // the search_path, so `migrate(db)` and `migrate(db, { schema: 'public' })` share one lock.
      await assertSupportedServer(tx);
      // IF NOT EXISTS answers an existing schema or table with a NOTICE, on every start after the
      // first; postgres-js prints notices to the console by default. Set locally, and put back before
      // returning with lock_timeout below: when `db` is the caller's transaction, this one is only a
      // savepoint, and a local setting lasts until the caller's transaction ends.
      const [saved] = await rowsOf<{ messages: string; lock: string }>(
        tx,
        sql`select current_setting('client_min_messages') as messages, current_setting('lock_timeout') as lock`,
      );
      await tx.execute(sql`select set_config('client_min_messages', 'warning', true)`);
      await tx.execute(sql`select pg_advisory_xact_lock(hashtext('inboxed:migrate:' || coalesce(${resolved.schema ?? null}::text, current_schema(), '')))`);
      // Set after the advisory lock: waiting for another migration is fine, waiting on the inbox is bounded.
      if (lockTimeoutMs !== null) await tx.execute(sql.raw(`set local lock_timeout = ${lockTimeoutMs}`));
      if (resolved.schema !== undefined) await tx.execute(sql.raw(`CREATE SCHEMA IF NOT EXISTS "${resolved.schema}"`));
      const historyName = resolved.schema === undefined ? `"${resolved.table}_migrations"` : `"${resolved.schema}"."${resolved.table}_migrations"`;
      await tx.execute(
        sql.raw(
          `CREATE TABLE IF NOT EXISTS ${historyName} ("version" integer PRIMARY KEY, "name" text NOT NULL, "applied_at" timestamp with time zone DEFAULT now() NOT NULL)`,
        ),
      );
      // Partitions are a choice made when the table is created; an existing table keeps its layout.
      const existing = await tx.execute(sql`select to_regclass(${inboxName}) is not null as found`);
      const found = (Array.isArray(existing) ? existing : (existing as { rows: { found: boolean }[] }).rows)[0]?.found === true;
      const layout: TableLayout = found ? {} : { partitions };
      const done = new Set((await tx.select({ version: history.version }).from(history)).map((r) => r.version));
      const applied: number[] = [];
      for (const migration of migrations) {
        if (done.has(migration.version)) continue;
        for (const statement of migration.statements(resolved, layout)) await tx.execute(sql.raw(statement));
        await tx.insert(history).values({ version: migration.version, name: migration.name });
        applied.push(migration.version);
      }
      // CREATE TABLE IF NOT EXISTS accepts any table of that name: make sure it is one inboxed can use.
      const problems = await inspectInboxTables(tx, createInboxTables(names));
      if (problems.length > 0) {
        throw new InboxError(InboxErrorCodes.MIGRATION_FAILED, `the existing inbox tables cannot be used: ${problems.join('; ')}`, {
          details: { schema: resolved.schema, table: resolved.table, problems },
        });
      }
      await tx.execute(sql`select set_config('client_min_messages', ${saved!.messages}, true), set_config('lock_timeout', ${saved!.lock}, true)`);
      return { applied, version: latest };
    });
  } catch (error) {
    if (isInboxError(error)) throw error;
    if (classifyDatabaseError(error) === 'lock-timeout') {
      throw new InboxError(
        InboxErrorCodes.MIGRATION_FAILED,
        `inbox migration failed: it waited lockTimeoutMs (${lockTimeoutMs} ms) for a lock on the inbox tables, held by open transactions (a consumer's, most likely); nothing was applied. Run it again when the inbox is quieter, or with a longer lockTimeoutMs`,
        { cause: error, details: { schema: resolved.schema, table: resolved.table, lockTimeoutMs } },
      );
    }
    throw new InboxError(InboxErrorCodes.MIGRATION_FAILED, `inbox migration failed: ${describeError(error)}`, {
      cause: error,
      details: { schema: resolved.schema, table: resolved.table },
    });
  }
}
