import { index, integer, pgSchema, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { assertIdentifier } from './identifiers.js';

/** Where the inbox lives. Defaults: schema `public`, tables `inbox` and `inbox_attempts`. */
export interface InboxTableNames {
  /** PostgreSQL schema; omit for the connection's default (`public`). */
  schema?: string;
  /** Name of the inbox table; the attempts table is `<table>_attempts`. Default `inbox`. */
  table?: string;
}

/** Resolved, validated names. */
export interface ResolvedTableNames {
  schema: string | undefined;
  table: string;
  attemptsTable: string;
}

/** Validates and fills in defaults for {@link InboxTableNames}. */
export function resolveTableNames(names: InboxTableNames = {}): ResolvedTableNames {
  const table = assertIdentifier(names.table ?? 'inbox', 'inbox table name');
  const attemptsTable = assertIdentifier(`${table}_attempts`, 'inbox attempts table name');
  const schema = names.schema === undefined ? undefined : assertIdentifier(names.schema, 'inbox schema name');
  return { schema, table, attemptsTable };
}

function inboxColumns() {
  return {
    consumer: text('consumer').notNull(),
    messageId: text('message_id').notNull(),
    /** SHA-256 hex of the canonical payload; null when fingerprinting is off. */
    fingerprint: text('fingerprint'),
    /** `processed` or `rejected`. */
    status: text('status').notNull(),
    /** The business reason of a `rejected` message. */
    reason: text('reason'),
    /** Where the message came from (`amqp:orders`, ...). */
    source: text('source'),
    receivedAt: timestamp('received_at', { withTimezone: true }).notNull().defaultNow(),
    completedAt: timestamp('completed_at', { withTimezone: true }).notNull().defaultNow(),
  };
}

function attemptColumns() {
  return {
    consumer: text('consumer').notNull(),
    messageId: text('message_id').notNull(),
    /** Failed attempts so far, counted durably so restarts and brokers without counts agree. */
    attempts: integer('attempts').notNull(),
    firstAttemptAt: timestamp('first_attempt_at', { withTimezone: true }).notNull().defaultNow(),
    lastAttemptAt: timestamp('last_attempt_at', { withTimezone: true }).notNull().defaultNow(),
    lastError: text('last_error'),
    lastErrorCode: text('last_error_code'),
  };
}

/**
 * Builds the Drizzle tables of an inbox with a custom schema or table name. Re-export the result
 * from your Drizzle schema file so `drizzle-kit generate` emits the migration:
 *
 * ```ts
 * // db/schema.ts
 * export const { inbox, inboxAttempts } = createInboxTables({ schema: 'messaging' });
 * ```
 *
 * Pass the same names to `withInbox({ tables })` and `migrate(db, names)`.
 */
export function createInboxTables(names: InboxTableNames = {}) {
  const resolved = resolveTableNames(names);
  // Cast: a schema-bound table function differs from pgTable only in the schema name it records.
  const table = (resolved.schema === undefined ? pgTable : pgSchema(resolved.schema).table) as typeof pgTable;
  const inbox = table(resolved.table, inboxColumns(), (t) => [
    primaryKey({ name: `${resolved.table}_pkey`, columns: [t.consumer, t.messageId] }),
    index(`${resolved.table}_completed_at_idx`).on(t.completedAt),
  ]);
  const inboxAttempts = table(resolved.attemptsTable, attemptColumns(), (t) => [
    primaryKey({ name: `${resolved.attemptsTable}_pkey`, columns: [t.consumer, t.messageId] }),
  ]);
  return { inbox, inboxAttempts };
}

/** The inbox tables as a pair, as returned by {@link createInboxTables}. */
export type InboxTables = ReturnType<typeof createInboxTables>;

const defaultTables = createInboxTables();

/** The default inbox table (`public.inbox`). Re-export it from your Drizzle schema for drizzle-kit. */
export const inboxTable = defaultTables.inbox;

/** The default attempts table (`public.inbox_attempts`), where failed attempts are counted. */
export const inboxAttemptsTable = defaultTables.inboxAttempts;
