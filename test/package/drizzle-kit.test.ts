import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { databaseUrl, uniqueName } from '@inboxed/test-support';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { mustRun, repoRoot, runCommand, transcript, userEnv, type CommandResult } from './support.js';

// A user's app, from the packed tarballs: installed with npm outside the workspace, type-checked
// against the published types, its Drizzle schema re-exporting the inbox tables, migrated with the
// real drizzle-kit CLI on fresh databases, then consuming a message with withInbox.

/** What a user installs next to the tarballs (the same ranges the monorepo tests against). */
const USER_DEPENDENCIES = ['drizzle-orm@^0.45.0', 'drizzle-kit@^0.31.0', 'pg@^8.16.0', '@types/pg@^8.11.0', 'typescript@~5.9.3', '@types/node@^20.19.0'];

const APP_FILES: Record<string, string> = {
  'package.json': JSON.stringify({ name: 'inboxed-scratch-app', private: true, type: 'module' }, null, 2),
  'tsconfig.json': JSON.stringify(
    {
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        skipLibCheck: true,
        outDir: 'dist',
        rootDir: 'src',
        types: ['node'],
      },
      include: ['src'],
    },
    null,
    2,
  ),
  // The README's main path: the inbox tables re-exported from the app's own Drizzle schema.
  'src/schema.ts': `import { integer, pgTable, text } from 'drizzle-orm/pg-core';
export { inboxTable, inboxAttemptsTable, inboxDeadLettersTable, inboxAuditTable } from '@inboxed/core';

export const orders = pgTable('orders', { id: text('id').primaryKey(), amountCents: integer('amount_cents').notNull() });
`,
  // The inbox in a schema of its own, from the schema-only entry; nothing else of the app uses that schema.
  'src/messaging-schema.ts': `import { createInboxTables } from '@inboxed/core/schema';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';

export const payments = pgTable('payments', { id: text('id').primaryKey(), amountCents: integer('amount_cents').notNull() });
export const { inboxSchema, inbox, inboxAttempts, inboxDeadLetters, inboxAudit } = createInboxTables({ schema: 'messaging' });
`,
  // Only the app's tables: the inbox belongs to inboxed's migrate(), in a schema of its own.
  'src/app-schema.ts': `import { integer, pgTable, text } from 'drizzle-orm/pg-core';

export const orders = pgTable('orders', { id: text('id').primaryKey(), amountCents: integer('amount_cents').notNull() });
`,
  'drizzle.config.ts': `import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/schema.ts',
  out: './drizzle',
  dbCredentials: { url: process.env.DATABASE_URL! },
});
`,
  'messaging.drizzle.config.ts': `import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/messaging-schema.ts',
  out: process.env.MIGRATIONS_OUT ?? './drizzle-messaging',
  schemaFilter: ['public', 'messaging'],
  dbCredentials: { url: process.env.DATABASE_URL! },
});
`,
  // The core README's config for migrate() owning the inbox in its own schema: drizzle-kit sees only public.
  'app-only.drizzle.config.ts': `import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/app-schema.ts',
  out: './drizzle-app',
  schemaFilter: ['public'],
  dbCredentials: { url: process.env.DATABASE_URL! },
});
`,
  // What the core README used to say for an inbox migrate() made in public: tablesFilter hides the
  // tables but not the sequences of their bigserial ids.
  'app-tables-filter.drizzle.config.ts': `import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/app-schema.ts',
  out: './drizzle-app',
  tablesFilter: ['!inbox', '!inbox_attempts', '!inbox_dead_letters', '!inbox_audit', '!inbox_migrations'],
  dbCredentials: { url: process.env.DATABASE_URL! },
});
`,
  // Processes one delivery twice and reports the outcomes and the effects that committed.
  'src/consumer.ts': `import { createInboxTables, withInbox } from '@inboxed/core';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { payments } from './messaging-schema.js';
import { orders } from './schema.js';

interface Order {
  id: string;
  amountCents: number;
}

// The inbox's schema (default: public). The messaging app writes payments, the others orders.
const inboxSchema = process.argv[2];
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const db = drizzle(pool);
const domainTable = inboxSchema === 'messaging' ? payments : orders;

const processOrder = withInbox(
  async (message, tx) => {
    const order = message.payload as Order;
    await tx.insert(domainTable).values({ id: order.id, amountCents: order.amountCents });
  },
  { db, consumer: 'billing.order-created', tables: createInboxTables(inboxSchema === undefined ? {} : { schema: inboxSchema }) },
);

try {
  const delivery = { id: 'evt-1', payload: { id: 'o-1', amountCents: 1299 } };
  const first = await processOrder(delivery);
  const second = await processOrder(delivery);
  const effects = (await db.select().from(domainTable)).length;
  console.log(JSON.stringify({ statuses: [first.status, second.status], effects }));
} finally {
  await pool.end();
}
`,
  // inboxed's own migrate(), for the users without drizzle-kit.
  'src/migrate.ts': `import { migrate } from '@inboxed/core';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
try {
  console.log(JSON.stringify(await migrate(drizzle(pool), process.argv[2] ? { schema: process.argv[2] } : {})));
} finally {
  await pool.end();
}
`,
  // drizzle-orm's migrator, which drizzle-kit migrate runs: it shows the reason the CLI does not print.
  'src/drizzle-migrator.ts': `import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
try {
  await migrate(drizzle(pool), { migrationsFolder: process.argv[2]! });
  console.log('applied');
} catch (error) {
  const cause = (error as { cause?: unknown }).cause;
  console.error(cause instanceof Error ? cause.message : String(error));
  process.exitCode = 2;
} finally {
  await pool.end();
}
`,
  // Every published package imports as ESM and its types resolve.
  'src/packages.ts': `import * as amqp from '@inboxed/amqp';
import * as core from '@inboxed/core';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import * as schema from '@inboxed/core/schema';
import * as kafka from '@inboxed/kafka';
import * as sqs from '@inboxed/sqs';

const entryPoints: Record<string, object> = { core, schema, amqp, kafka, sqs };
const used: unknown[] = [amqp.createAmqpConsumer, kafka.createKafkaConsumer, sqs.createSqsConsumer, core.withInbox, schema.createInboxTables, createOutcomeRecorder];
console.log(JSON.stringify({ loaded: Object.keys(entryPoints).filter((name) => Object.keys(entryPoints[name]!).length > 0), used: used.length }));
`,
  // CommonJS consumers (and drizzle-kit's schema loader) require() the ESM packages: Node >= 20.19.
  'require-check.cjs': `const names = ['@inboxed/core', '@inboxed/core/schema', '@inboxed/core/testing', '@inboxed/amqp', '@inboxed/kafka', '@inboxed/sqs'];
console.log(JSON.stringify(names.filter((name) => Object.keys(require(name)).length > 0)));
`,
};

/** The shape of an ESM-only dependency that drizzle-kit's require() cannot load (canonicalize 4 was one). */
const BROKEN_FILES: Record<string, string> = {
  'node_modules/esm-only-dependency/package.json': JSON.stringify({
    name: 'esm-only-dependency',
    version: '1.0.0',
    type: 'module',
    exports: { import: './index.js' },
  }),
  'node_modules/esm-only-dependency/index.js': 'export const value = 1;\n',
  'broken/schema.ts': `import 'esm-only-dependency';
export { inboxTable, inboxAttemptsTable, inboxDeadLettersTable, inboxAuditTable } from '@inboxed/core/schema';
`,
  'broken.drizzle.config.ts': `import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './broken/schema.ts',
  out: './drizzle-broken',
  dbCredentials: { url: process.env.DATABASE_URL! },
});
`,
};

let app: string;
let admin: pg.Client;
const databases: string[] = [];
const tarballs = inject('tarballs');

function writeFiles(files: Record<string, string>): void {
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(app, path, '..'), { recursive: true });
    writeFileSync(join(app, path), text);
  }
}

/** A fresh, uniquely named database on the test server, dropped after the file. */
async function freshDatabase(label: string): Promise<string> {
  const name = uniqueName(`inboxed_pkg_${label}`);
  await admin.query(`create database "${name}"`);
  databases.push(name);
  const url = new URL(databaseUrl());
  url.pathname = `/${name}`;
  return url.toString();
}

/** Runs one statement on a database of the test server, on a connection of its own. */
async function queryOn<T extends object>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/** Tables outside the system schemas, as `schema.table`. */
async function tablesIn(url: string): Promise<string[]> {
  const rows = await queryOn<{ name: string }>(
    url,
    `select table_schema || '.' || table_name as name from information_schema.tables
     where table_schema not in ('pg_catalog', 'information_schema') and table_type = 'BASE TABLE' order by 1`,
  );
  return rows.map((row) => row.name);
}

/** Sequences outside the system schemas, as `schema.sequence`. */
async function sequencesIn(url: string): Promise<string[]> {
  const rows = await queryOn<{ name: string }>(url, `select schemaname || '.' || sequencename as name from pg_sequences order by 1`);
  return rows.map((row) => row.name);
}

/** The inbox migrate() made, in the schema the core README gives it when drizzle-kit push manages the app's tables. */
const INBOX_IN_INBOXED_SCHEMA = ['inboxed.inbox', 'inboxed.inbox_attempts', 'inboxed.inbox_audit', 'inboxed.inbox_dead_letters', 'inboxed.inbox_migrations'];

/** The core README's statements moving an inbox migrate() made in public into a schema of its own (one transaction). */
const MOVE_INBOX_TO_OWN_SCHEMA = `BEGIN;
CREATE SCHEMA inboxed;
ALTER TABLE public.inbox SET SCHEMA inboxed;
ALTER TABLE public.inbox_attempts SET SCHEMA inboxed;
ALTER TABLE public.inbox_dead_letters SET SCHEMA inboxed;
ALTER TABLE public.inbox_audit SET SCHEMA inboxed;
ALTER TABLE public.inbox_migrations SET SCHEMA inboxed;
COMMIT;`;

/** Primary keys of the inbox tables, as drizzle-kit named them: inboxed's ON CONFLICT needs them. */
async function primaryKeysIn(url: string, schema: string): Promise<string[]> {
  const rows = await queryOn<{ key: string }>(
    url,
    `select conname || ' ' || pg_get_constraintdef(c.oid) as key from pg_constraint c join pg_namespace n on n.oid = c.connamespace
     where n.nspname = $1 and c.contype = 'p' and conname like 'inbox%' order by 1`,
    [schema],
  );
  return rows.map((row) => row.key);
}

/** The real CLI, as `npx drizzle-kit ...` runs it. */
function drizzleKit(args: string[], url: string, extraEnv: Record<string, string> = {}): Promise<CommandResult> {
  return runCommand(process.execPath, [join(app, 'node_modules', 'drizzle-kit', 'bin.cjs'), ...args], {
    cwd: app,
    env: userEnv({ DATABASE_URL: url, ...extraEnv }),
  });
}

/**
 * What drizzle-kit prints for a failure it still exits 0 from: a thrown error by its name (`Error:`,
 * `TypeError`, drizzle-kit's own ` Error ` badge), a Node.js error code, or a statement PostgreSQL
 * refused, which node-postgres's DatabaseError prints as a line starting `error: ` (lower case).
 * drizzle-kit's normal output has none of them: statements quote their identifiers (`"last_error"`).
 */
const DRIZZLE_KIT_FAILURES = [/\b(?:[A-Z][a-z]+)*Error\b/, /\bERR_[A-Z_]+/, /^\s*error: /m];

/**
 * drizzle-kit 0.31 exits 0 from `push` and `generate` when the schema file fails to load, when it
 * needs an interactive answer it cannot get without a TTY, and when PostgreSQL refuses one of the
 * statements `push` runs; it only prints the error. So a run counts as successful only with exit
 * code 0 and none of {@link DRIZZLE_KIT_FAILURES} printed.
 */
function expectDrizzleKitSucceeded(result: CommandResult): void {
  const printed = `${result.stdout}\n${result.stderr}`;
  expect(result.code, transcript(result)).toBe(0);
  for (const failure of DRIZZLE_KIT_FAILURES) expect(printed, transcript(result)).not.toMatch(failure);
}

/** Runs one of the app's compiled scripts against a database. */
async function appScript(script: string, args: string[], url: string): Promise<CommandResult> {
  return runCommand(process.execPath, [join(app, 'dist', `${script}.js`), ...args], { cwd: app, env: userEnv({ DATABASE_URL: url }) });
}

async function consume(url: string, schema?: string): Promise<unknown> {
  const result = await appScript('consumer', schema === undefined ? [] : [schema], url);
  expect(result.code, transcript(result)).toBe(0);
  return JSON.parse(result.stdout.trim().split('\n').pop()!);
}

async function inboxedMigrate(url: string, schema?: string): Promise<unknown> {
  const result = await appScript('migrate', schema === undefined ? [] : [schema], url);
  expect(result.code, transcript(result)).toBe(0);
  return JSON.parse(result.stdout.trim().split('\n').pop()!);
}

function migrationSql(folder: string): string {
  const files = readdirSync(join(app, folder)).filter((file) => file.endsWith('.sql'));
  expect(files).toHaveLength(1);
  return readFileSync(join(app, folder, files[0]!), 'utf8');
}

const PROCESSED_THEN_DUPLICATE = { statuses: ['processed', 'duplicate'], effects: 1 };

beforeAll(async () => {
  admin = new pg.Client({ connectionString: databaseUrl() });
  await admin.connect();
  app = await mkdtemp(join(tmpdir(), 'inboxed-app-'));
  expect(app.startsWith(repoRoot)).toBe(false);
  writeFiles(APP_FILES);
  const packages = Object.values(tarballs);
  await mustRun('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...packages, ...USER_DEPENDENCIES], { cwd: app, timeoutMs: 280_000 });
  await mustRun(join(app, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json'], { cwd: app });
});

afterAll(async () => {
  for (const name of databases) await admin?.query(`drop database if exists "${name}" with (force)`);
  await admin?.end();
  if (app !== undefined && process.env.KEEP_SCRATCH_APP === undefined) await rm(app, { recursive: true, force: true });
});

describe('a user app installed from the tarballs', () => {
  it('type-checks against the published types, imports every package as ESM, and require()s them from CommonJS', async () => {
    // tsc already compiled the app in beforeAll; now run what it built.
    const esm = await runCommand(process.execPath, ['dist/packages.js'], { cwd: app });
    expect(esm.code, transcript(esm)).toBe(0);
    expect(JSON.parse(esm.stdout)).toEqual({ loaded: ['core', 'schema', 'amqp', 'kafka', 'sqs'], used: 6 });
    const cjs = await runCommand(process.execPath, ['require-check.cjs'], { cwd: app });
    expect(cjs.code, transcript(cjs)).toBe(0);
    expect(JSON.parse(cjs.stdout)).toHaveLength(6);
  });

  it('drizzle-kit generate and migrate create public.inbox from the re-exported tables; withInbox processes, then sees a duplicate', async () => {
    const generate = await drizzleKit(['generate'], 'postgres://unused');
    expectDrizzleKitSucceeded(generate);
    console.log(`drizzle-kit generate (public):\n${generate.stdout.trim()}`);
    const generated = migrationSql('drizzle');
    expect(generated).toContain('CREATE TABLE "inbox" (');
    expect(generated).toContain('CREATE TABLE "inbox_attempts" (');
    expect(generated).toContain('CREATE INDEX "inbox_completed_at_idx" ON "inbox" USING btree ("completed_at")');
    expect(generated).not.toContain('CREATE SCHEMA');

    const url = await freshDatabase('public');
    expectDrizzleKitSucceeded(await drizzleKit(['migrate'], url));
    expect(await tablesIn(url)).toEqual([
      'drizzle.__drizzle_migrations',
      'public.inbox',
      'public.inbox_attempts',
      'public.inbox_audit',
      'public.inbox_dead_letters',
      'public.orders',
    ]);
    expect(await primaryKeysIn(url, 'public')).toEqual([
      'inbox_attempts_pkey PRIMARY KEY (consumer, message_id)',
      'inbox_audit_pkey PRIMARY KEY (id)',
      'inbox_dead_letters_pkey PRIMARY KEY (id)',
      'inbox_pkey PRIMARY KEY (consumer, message_id)',
    ]);
    expect(await consume(url)).toEqual(PROCESSED_THEN_DUPLICATE);

    // Applying again is a no-op, and inboxed's migrate() adopts the tables drizzle-kit made.
    expectDrizzleKitSucceeded(await drizzleKit(['migrate'], url));
    expect(await inboxedMigrate(url)).toEqual({ applied: [1, 2, 3], version: 3 });
    expect(await consume(url)).toEqual({ statuses: ['duplicate', 'duplicate'], effects: 1 });
  });

  it("createInboxTables({ schema: 'messaging' }) makes drizzle-kit emit CREATE SCHEMA, so the migration runs on a fresh database", async () => {
    const generate = await drizzleKit(['generate', '--config', 'messaging.drizzle.config.ts'], 'postgres://unused');
    expectDrizzleKitSucceeded(generate);
    console.log(`drizzle-kit generate (messaging):\n${generate.stdout.trim()}`);
    const generated = migrationSql('drizzle-messaging');
    expect(generated.match(/CREATE SCHEMA/g)).toEqual(['CREATE SCHEMA']);
    expect(generated.startsWith('CREATE SCHEMA "messaging";')).toBe(true);
    expect(generated).toContain('CREATE TABLE "messaging"."inbox" (');
    expect(generated).toContain('CREATE TABLE "messaging"."inbox_attempts" (');

    const url = await freshDatabase('messaging');
    expectDrizzleKitSucceeded(await drizzleKit(['migrate', '--config', 'messaging.drizzle.config.ts'], url));
    expect(await tablesIn(url)).toEqual([
      'drizzle.__drizzle_migrations',
      'messaging.inbox',
      'messaging.inbox_attempts',
      'messaging.inbox_audit',
      'messaging.inbox_dead_letters',
      'public.payments',
    ]);
    expect(await primaryKeysIn(url, 'messaging')).toHaveLength(4);
    expect(await consume(url, 'messaging')).toEqual(PROCESSED_THEN_DUPLICATE);
    expect(await inboxedMigrate(url, 'messaging')).toEqual({ applied: [1, 2, 3], version: 3 });
  });

  it('drizzle-kit push creates the same tables on a fresh database, and a second push finds nothing to change', async () => {
    const url = await freshDatabase('push');
    const push = await drizzleKit(['push', '--force', '--verbose', '--config', 'messaging.drizzle.config.ts'], url);
    expectDrizzleKitSucceeded(push);
    expect(push.stdout).toContain('CREATE SCHEMA "messaging"');
    expect(await tablesIn(url)).toEqual([
      'messaging.inbox',
      'messaging.inbox_attempts',
      'messaging.inbox_audit',
      'messaging.inbox_dead_letters',
      'public.payments',
    ]);
    const again = await drizzleKit(['push', '--force', '--config', 'messaging.drizzle.config.ts'], url);
    expectDrizzleKitSucceeded(again);
    expect(again.stdout).toContain('No changes detected');
    expect(await consume(url, 'messaging')).toEqual(PROCESSED_THEN_DUPLICATE);
  });

  it('a schema file drizzle-kit cannot load fails this suite, although drizzle-kit push and generate exit 0', async () => {
    writeFiles(BROKEN_FILES);
    const url = await freshDatabase('broken');
    for (const command of ['push', 'generate']) {
      const result = await drizzleKit([command, '--config', 'broken.drizzle.config.ts'], url);
      // The failure of issue 9 (canonicalize 4 through require()), reproduced with a local package.
      expect(`${result.stdout}\n${result.stderr}`, transcript(result)).toMatch(/ERR_PACKAGE_PATH_NOT_EXPORTED|No "exports" main defined/);
      expect(() => expectDrizzleKitSucceeded(result), `${command}: ${transcript(result)}`).toThrow();
    }
    expect(await tablesIn(url)).toEqual([]);
  });

  it('after migrate(), a generated migration stops at "already exists"; edited to IF NOT EXISTS it adopts the tables (switching to drizzle-kit)', async () => {
    const url = await freshDatabase('switch');
    expect(await inboxedMigrate(url, 'messaging')).toEqual({ applied: [1, 2, 3], version: 3 });
    cpSync(join(app, 'drizzle-messaging'), join(app, 'drizzle-switch'), { recursive: true });
    const env = { MIGRATIONS_OUT: './drizzle-switch' };

    const refused = await drizzleKit(['migrate', '--config', 'messaging.drizzle.config.ts'], url, env);
    expect(refused.code, transcript(refused)).toBe(1);
    // drizzle-kit migrate prints no reason; drizzle-orm's migrator (what it runs) shows it.
    const reason = await appScript('drizzle-migrator', [join(app, 'drizzle-switch')], url);
    expect(reason.code, transcript(reason)).toBe(2);
    expect(reason.stderr).toContain('schema "messaging" already exists');
    expect(await tablesIn(url)).toEqual([
      'drizzle.__drizzle_migrations',
      'messaging.inbox',
      'messaging.inbox_attempts',
      'messaging.inbox_audit',
      'messaging.inbox_dead_letters',
      'messaging.inbox_migrations',
    ]);

    // The documented switch: the generated inbox statements become CREATE ... IF NOT EXISTS, and
    // inboxed's history table goes (drizzle-kit owns the tables from now on).
    const file = readdirSync(join(app, 'drizzle-switch')).find((name) => name.endsWith('.sql'))!;
    const original = readFileSync(join(app, 'drizzle-switch', file), 'utf8');
    const edited = original
      .split('--> statement-breakpoint')
      .map((statement) =>
        /CREATE SCHEMA "messaging"|"inbox(_attempts|_dead_letters|_audit)?"/.test(statement)
          ? statement.replace(/CREATE (SCHEMA|TABLE|INDEX) /, 'CREATE $1 IF NOT EXISTS ')
          : statement,
      )
      .join('--> statement-breakpoint');
    // CREATE SCHEMA, the four tables, the completed_at index, the open-claims index of migration 2 and
    // migration 3's three indexes.
    expect(edited.match(/IF NOT EXISTS/g)).toHaveLength(10);
    writeFileSync(join(app, 'drizzle-switch', file), edited);
    expectDrizzleKitSucceeded(await drizzleKit(['migrate', '--config', 'messaging.drizzle.config.ts'], url, env));
    await queryOn(url, 'drop table messaging.inbox_migrations');
    const push = await drizzleKit(['push', '--force', '--config', 'messaging.drizzle.config.ts'], url);
    expectDrizzleKitSucceeded(push);
    expect(push.stdout).toContain('No changes detected');
    expect(await consume(url, 'messaging')).toEqual(PROCESSED_THEN_DUPLICATE);
  });

  it("with migrate() owning the inbox in a schema of its own, drizzle-kit push with schemaFilter ['public'] leaves it alone", async () => {
    const url = await freshDatabase('owned');
    expect(await inboxedMigrate(url, 'inboxed')).toEqual({ applied: [1, 2, 3], version: 3 });
    const push = await drizzleKit(['push', '--force', '--verbose', '--config', 'app-only.drizzle.config.ts'], url);
    expectDrizzleKitSucceeded(push);
    expect(push.stdout).toContain('CREATE TABLE "orders"');
    expect(push.stdout).not.toMatch(/\bDROP\b/);
    expect(push.stdout).toContain('Changes applied');
    expect(await tablesIn(url)).toEqual([...INBOX_IN_INBOXED_SCHEMA, 'public.orders']);
    expect(await sequencesIn(url)).toEqual(['inboxed.inbox_audit_id_seq', 'inboxed.inbox_dead_letters_id_seq']);
    const again = await drizzleKit(['push', '--force', '--verbose', '--config', 'app-only.drizzle.config.ts'], url);
    expectDrizzleKitSucceeded(again);
    expect(again.stdout).toContain('No changes detected');
    expect(await consume(url, 'inboxed')).toEqual(PROCESSED_THEN_DUPLICATE);
    expect(await inboxedMigrate(url, 'inboxed')).toEqual({ applied: [], version: 3 });
  });

  it('in public, tablesFilter does not hide the inbox sequences from drizzle-kit push; moved into a schema of its own, the inbox is left alone', async () => {
    const url = await freshDatabase('filtered');
    expect(await inboxedMigrate(url)).toEqual({ applied: [1, 2, 3], version: 3 });
    const refused = await drizzleKit(['push', '--force', '--verbose', '--config', 'app-tables-filter.drizzle.config.ts'], url);
    // drizzle-kit 0.31 exits 0, but PostgreSQL refused the drop: the check above must see it.
    expect(refused.stdout).toContain('DROP SEQUENCE "public"."inbox_dead_letters_id_seq"');
    expect(`${refused.stdout}\n${refused.stderr}`).toMatch(/^error: cannot drop sequence inbox_dead_letters_id_seq/m);
    expect(() => expectDrizzleKitSucceeded(refused), transcript(refused)).toThrow();
    expect(await sequencesIn(url)).toEqual(['public.inbox_audit_id_seq', 'public.inbox_dead_letters_id_seq']);

    // The core README's move: the tables take their indexes, keys and sequences along.
    await queryOn(url, MOVE_INBOX_TO_OWN_SCHEMA);
    expect(await inboxedMigrate(url, 'inboxed')).toEqual({ applied: [], version: 3 });
    const push = await drizzleKit(['push', '--force', '--verbose', '--config', 'app-only.drizzle.config.ts'], url);
    expectDrizzleKitSucceeded(push);
    expect(push.stdout).not.toMatch(/\bDROP\b/);
    expect(await tablesIn(url)).toEqual([...INBOX_IN_INBOXED_SCHEMA, 'public.orders']);
    expect(await sequencesIn(url)).toEqual(['inboxed.inbox_audit_id_seq', 'inboxed.inbox_dead_letters_id_seq']);
    expect(await consume(url, 'inboxed')).toEqual(PROCESSED_THEN_DUPLICATE);
  });
});
