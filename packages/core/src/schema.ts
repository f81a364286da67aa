import { sql } from 'drizzle-orm';
import { bigserial, index, integer, jsonb, pgSchema, pgTable, primaryKey, text, timestamp, type PgSchema } from 'drizzle-orm/pg-core';
import { InboxError, InboxErrorCodes } from './errors.js';
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
  deadLettersTable: string;
  auditTable: string;
}

/** Validates and fills in defaults for {@link InboxTableNames}. */
export function resolveTableNames(names: InboxTableNames = {}): ResolvedTableNames {
  const table = assertIdentifier(names.table ?? 'inbox', 'inbox table name');
  const attemptsTable = assertIdentifier(`${table}_attempts`, 'inbox attempts table name');
  const deadLettersTable = assertIdentifier(`${table}_dead_letters`, 'inbox dead-letters table name');
  const auditTable = assertIdentifier(`${table}_audit`, 'inbox audit table name');
  // PostgreSQL cuts longer names to 63 bytes, silently: two indexes would collapse into one name and
  // CREATE INDEX IF NOT EXISTS would skip the second. The longest derived name is this index's.
  const longest = `${deadLettersTable}_message_idx`;
  if (longest.length > 63) {
    throw new InboxError(
      InboxErrorCodes.INVALID_IDENTIFIER,
      `inbox table name ${JSON.stringify(table)} is too long: inboxed derives names up to 25 characters longer (${longest}), and PostgreSQL cuts names at 63; use at most 38 characters`,
      { details: { what: 'inbox table name', name: table } },
    );
  }
  const schema = names.schema === undefined ? undefined : assertIdentifier(names.schema, 'inbox schema name');
  return { schema, table, attemptsTable, deadLettersTable, auditTable };
}

function inboxColumns() {
  return {
    consumer: text('consumer').notNull(),
    messageId: text('message_id').notNull(),
    /** SHA-256 hex of the canonical payload; null when fingerprinting is off. */
    fingerprint: text('fingerprint'),
    /** `processed` or `rejected`; `processing` while a leased-mode claim is open. */
    status: text('status').notNull(),
    /** The business reason of a `rejected` message. */
    reason: text('reason'),
    /** Where the message came from (`amqp:orders`, ...). */
    source: text('source'),
    receivedAt: timestamp('received_at', { withTimezone: true }).notNull().defaultNow(),
    /** When the row was completed; for a `processing` row, when its claim last changed hands. */
    completedAt: timestamp('completed_at', { withTimezone: true }).notNull().defaultNow(),
    /** Leased mode: when the open claim's lease ends (server time); null once completed or released. */
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true }),
    /** Leased mode: the fencing token of the latest claim, +1 on every later claim. */
    fencingToken: integer('fencing_token').notNull().default(1),
    /** The handler's stored result (`storeResult(value)`) as JSON text, replayed on duplicates. */
    result: text('result'),
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

function deadLetterColumns() {
  return {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    consumer: text('consumer').notNull(),
    /** The message id as received (a printable form of an invalid one, empty when there was none). */
    messageId: text('message_id').notNull(),
    /** The outcome's stable reason (`max-attempts-exceeded`, `payload-mismatch`, ...). */
    reason: text('reason').notNull(),
    errorCode: text('error_code'),
    /** The error's description, bounded and storable; never payload data. */
    error: text('error'),
    /** Failed attempts counted for it (the attempts ledger's count, moved here when it was dead-lettered). */
    attempts: integer('attempts').notNull(),
    firstAttemptAt: timestamp('first_attempt_at', { withTimezone: true }),
    lastAttemptAt: timestamp('last_attempt_at', { withTimezone: true }),
    /** Where the adapter sent it (`amqp:orders.dead-letter`, `kafka:payments.dlq`, an SQS queue URL). */
    destination: text('destination'),
    /** Where it came from (`amqp:orders`, `kafka:payments/3`). */
    source: text('source'),
    deadLetteredAt: timestamp('dead_lettered_at', { withTimezone: true }).notNull().defaultNow(),
  };
}

function auditColumns() {
  return {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
    /** Who did it: `--actor`, or the OS user running the CLI. */
    actor: text('actor').notNull(),
    /** The repair: `release`, `requeue`, `purge`, ... */
    action: text('action').notNull(),
    consumer: text('consumer'),
    messageId: text('message_id'),
    /** Why, in the operator's words. */
    reason: text('reason'),
    /** The affected rows before and after, as JSON. */
    before: jsonb('before'),
    after: jsonb('after'),
  };
}

function buildTables(resolved: ResolvedTableNames, inboxSchema: PgSchema | undefined) {
  // Cast: a schema-bound table function differs from pgTable only in the schema name it records.
  const table = (inboxSchema === undefined ? pgTable : inboxSchema.table) as typeof pgTable;
  const inbox = table(resolved.table, inboxColumns(), (t) => [
    primaryKey({ name: `${resolved.table}_pkey`, columns: [t.consumer, t.messageId] }),
    index(`${resolved.table}_completed_at_idx`).on(t.completedAt),
    // Open leased claims only: tiny however large the inbox, so reporting them stays cheap.
    index(`${resolved.table}_processing_idx`).on(t.completedAt).where(sql`status = 'processing'`),
  ]);
  const inboxAttempts = table(resolved.attemptsTable, attemptColumns(), (t) => [
    primaryKey({ name: `${resolved.attemptsTable}_pkey`, columns: [t.consumer, t.messageId] }),
  ]);
  // Append-only records: what was dead-lettered (across brokers), and every repair an operator made.
  const inboxDeadLetters = table(resolved.deadLettersTable, deadLetterColumns(), (t) => [
    index(`${resolved.deadLettersTable}_message_idx`).on(t.consumer, t.messageId),
    index(`${resolved.deadLettersTable}_at_idx`).on(t.deadLetteredAt),
  ]);
  const inboxAudit = table(resolved.auditTable, auditColumns(), (t) => [index(`${resolved.auditTable}_at_idx`).on(t.at)]);
  return { inbox, inboxAttempts, inboxDeadLetters, inboxAudit };
}

/**
 * The inbox tables as a pair: what `withInbox({ tables })`, `purgeInbox({ tables })` and the
 * adapters accept, and the `inbox`/`inboxAttempts` part of {@link createInboxTables}' result.
 */
export type InboxTables = ReturnType<typeof buildTables>;

/**
 * What {@link createInboxTables} returns: the two tables plus, when the inbox lives in a schema of
 * its own, that schema as a Drizzle `PgSchema` (`inboxSchema`), `undefined` otherwise.
 */
export type CreatedInboxTables<S extends PgSchema | undefined = PgSchema | undefined> = InboxTables & {
  /**
   * The PostgreSQL schema the tables live in, as Drizzle's `pgSchema(name)`; `undefined` for the
   * connection's default schema. Export it from your Drizzle schema file: drizzle-kit emits
   * `CREATE SCHEMA` only for an exported `PgSchema`, so without it the generated migration fails on
   * a fresh database.
   */
  inboxSchema: S;
};

/**
 * Builds the Drizzle tables of an inbox with a custom schema or table name. Export everything it
 * returns from your Drizzle schema file, so `drizzle-kit generate` emits the whole migration,
 * `CREATE SCHEMA` included:
 *
 * ```ts
 * // db/schema.ts
 * import { createInboxTables } from '@inboxed/core/schema';
 *
 * export const { inboxSchema, inbox, inboxAttempts, inboxDeadLetters, inboxAudit } = createInboxTables({ schema: 'messaging' });
 * ```
 *
 * `inboxSchema` is Drizzle's `pgSchema('messaging')` (`undefined` without a `schema` name); exporting
 * it next to a `pgSchema('messaging')` of your own is fine, drizzle-kit creates the schema once.
 * With a schema other than `public`, also list it in drizzle.config.ts's `schemaFilter` (e.g.
 * `schemaFilter: ['public', 'messaging']`): `drizzle-kit push` only looks at `public` by default,
 * and otherwise reports "No changes detected" and creates nothing.
 *
 * Pass the same names to `withInbox({ tables })` and `migrate(db, names)`, or pass the result itself
 * as `tables`.
 */
export function createInboxTables<const S extends string>(names: InboxTableNames & { schema: S }): CreatedInboxTables<PgSchema<S>>;
export function createInboxTables(names?: InboxTableNames): CreatedInboxTables;
export function createInboxTables(names: InboxTableNames = {}): CreatedInboxTables {
  const resolved = resolveTableNames(names);
  const inboxSchema = resolved.schema === undefined ? undefined : pgSchema(resolved.schema);
  return { inboxSchema, ...buildTables(resolved, inboxSchema) };
}

const defaultTables = createInboxTables();

/** The default inbox table (`public.inbox`). Re-export it from your Drizzle schema for drizzle-kit. */
export const inboxTable = defaultTables.inbox;

/** The default attempts table (`public.inbox_attempts`), where failed attempts are counted. */
export const inboxAttemptsTable = defaultTables.inboxAttempts;

/** The default dead-letter record table (`public.inbox_dead_letters`): every dead-letter, across brokers. */
export const inboxDeadLettersTable = defaultTables.inboxDeadLetters;

/** The default audit table (`public.inbox_audit`): every repair made through the `inboxed` CLI. */
export const inboxAuditTable = defaultTables.inboxAudit;
