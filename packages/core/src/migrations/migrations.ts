import type { ResolvedTableNames } from '../schema.js';

/** How the inbox table is laid out when a migration creates it. */
export interface TableLayout {
  /** Hash partitions of the inbox table by `message_id` (2 to 1024); unpartitioned when undefined. */
  partitions?: number | undefined;
}

/** One numbered schema change. `statements` run in order inside `migrate()`'s transaction. */
export interface Migration {
  version: number;
  name: string;
  statements(names: ResolvedTableNames, layout?: TableLayout): string[];
}

function qualified(names: ResolvedTableNames, table: string): string {
  return names.schema === undefined ? `"${table}"` : `"${names.schema}"."${table}"`;
}

/**
 * The inbox's schema history. Append only: a released migration never changes, so databases
 * migrated by an older release and by `drizzle-kit` from `createInboxTables()` stay identical.
 * `scripts/write-migrations.ts` renders these, with default names, into `migrations/*.sql`.
 *
 * Every statement must be idempotent (`IF NOT EXISTS`, `ADD COLUMN IF NOT EXISTS`, ...): `migrate()`
 * also runs on tables that drizzle-kit created, from any release's `createInboxTables()`, and then
 * adopts them by recording the versions. (drizzle-kit's own SQL has no `IF NOT EXISTS`, so the other
 * order, a generated migration after `migrate()`, needs that edit by hand; see the README.)
 */
export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'create_inbox',
    statements: (names, layout = {}) => {
      const inbox = qualified(names, names.table);
      const attempts = qualified(names, names.attemptsTable);
      // Hash partitions by message_id: the unique key (consumer, message_id) holds the partition key,
      // so PostgreSQL still enforces it across partitions and ON CONFLICT works unchanged.
      const partitioned = layout.partitions === undefined ? '' : ' PARTITION BY HASH ("message_id")';
      const partitions = Array.from({ length: layout.partitions ?? 0 }, (_, i) => {
        const partition = qualified(names, `${names.table}_p${i}`);
        return `CREATE TABLE IF NOT EXISTS ${partition} PARTITION OF ${inbox} FOR VALUES WITH (MODULUS ${layout.partitions}, REMAINDER ${i})`;
      });
      return [
        `CREATE TABLE IF NOT EXISTS ${inbox} (
\t"consumer" text NOT NULL,
\t"message_id" text NOT NULL,
\t"fingerprint" text,
\t"status" text NOT NULL,
\t"reason" text,
\t"source" text,
\t"received_at" timestamp with time zone DEFAULT now() NOT NULL,
\t"completed_at" timestamp with time zone DEFAULT now() NOT NULL,
\tCONSTRAINT "${names.table}_pkey" PRIMARY KEY("consumer","message_id")
)${partitioned}`,
        ...partitions,
        `CREATE TABLE IF NOT EXISTS ${attempts} (
\t"consumer" text NOT NULL,
\t"message_id" text NOT NULL,
\t"attempts" integer NOT NULL,
\t"first_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
\t"last_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
\t"last_error" text,
\t"last_error_code" text,
\tCONSTRAINT "${names.attemptsTable}_pkey" PRIMARY KEY("consumer","message_id")
)`,
        `CREATE INDEX IF NOT EXISTS "${names.table}_completed_at_idx" ON ${inbox} USING btree ("completed_at")`,
      ];
    },
  },
  {
    // Leased mode and stored results. Adding columns with a constant default rewrites nothing
    // (PostgreSQL 11+), so this is quick on a large inbox; existing rows are completed rows.
    version: 2,
    name: 'leases_and_results',
    statements: (names) => {
      const inbox = qualified(names, names.table);
      return [
        `ALTER TABLE ${inbox} ADD COLUMN IF NOT EXISTS "lease_expires_at" timestamp with time zone`,
        `ALTER TABLE ${inbox} ADD COLUMN IF NOT EXISTS "fencing_token" integer DEFAULT 1 NOT NULL`,
        `ALTER TABLE ${inbox} ADD COLUMN IF NOT EXISTS "result" text`,
        // Scans the table once to build (holding off writes meanwhile): on a very large inbox, create
        // it beforehand with CREATE INDEX CONCURRENTLY under this name, and this statement skips it.
        `CREATE INDEX IF NOT EXISTS "${names.table}_processing_idx" ON ${inbox} USING btree ("completed_at") WHERE status = 'processing'`,
      ];
    },
  },
  {
    // Operations: a record of every dead-letter (listable across brokers) and an append-only audit
    // of operators' repairs. New tables only; nothing existing is touched.
    version: 3,
    name: 'dead_letters_and_audit',
    statements: (names) => {
      const deadLetters = qualified(names, names.deadLettersTable);
      const audit = qualified(names, names.auditTable);
      return [
        `CREATE TABLE IF NOT EXISTS ${deadLetters} (
\t"id" bigserial PRIMARY KEY NOT NULL,
\t"consumer" text NOT NULL,
\t"message_id" text NOT NULL,
\t"reason" text NOT NULL,
\t"error_code" text,
\t"error" text,
\t"attempts" integer NOT NULL,
\t"first_attempt_at" timestamp with time zone,
\t"last_attempt_at" timestamp with time zone,
\t"destination" text,
\t"source" text,
\t"dead_lettered_at" timestamp with time zone DEFAULT now() NOT NULL
)`,
        `CREATE TABLE IF NOT EXISTS ${audit} (
\t"id" bigserial PRIMARY KEY NOT NULL,
\t"at" timestamp with time zone DEFAULT now() NOT NULL,
\t"actor" text NOT NULL,
\t"action" text NOT NULL,
\t"consumer" text,
\t"message_id" text,
\t"reason" text,
\t"before" jsonb,
\t"after" jsonb
)`,
        `CREATE INDEX IF NOT EXISTS "${names.deadLettersTable}_message_idx" ON ${deadLetters} USING btree ("consumer","message_id")`,
        `CREATE INDEX IF NOT EXISTS "${names.deadLettersTable}_at_idx" ON ${deadLetters} USING btree ("dead_lettered_at")`,
        `CREATE INDEX IF NOT EXISTS "${names.auditTable}_at_idx" ON ${audit} USING btree ("at")`,
      ];
    },
  },
];

/** Renders a migration as one SQL file, statements separated the way drizzle-kit separates them. */
export function renderMigrationSql(migration: Migration, names: ResolvedTableNames): string {
  return (
    `-- inboxed migration ${String(migration.version).padStart(4, '0')}_${migration.name}\n` +
    migration
      .statements(names)
      .map((s) => `${s};`)
      .join('\n--> statement-breakpoint\n') +
    '\n'
  );
}
