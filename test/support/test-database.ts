import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { bigserial, integer, jsonb, pgSchema, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import postgres3 from 'postgres';
import { databaseUrl } from './services.js';
import { uniqueName } from './unique-name.js';

/**
 * The postgres-js the `postgres-js` driver runs on: the workspace's 3.x, or the package installed at
 * `INBOXED_POSTGRES_JS_PACKAGE` (a directory holding postgres-js's package.json). The Node 22 run
 * of `scripts/node-matrix.mjs` points it at 4.x, installed with npm outside the workspace: in the
 * workspace, pnpm would resolve drizzle-orm's optional `postgres` peer to 4.x in every package that
 * does not pin it, and TypeScript would then see two drizzle-orms. The majors differ in the pool and
 * the transactions inboxed reaches into, so both are proven. Typed as 3.x: the tests use what the two
 * share.
 */
async function loadPostgresJs(): Promise<{ postgres: typeof postgres3; major: number }> {
  const dir = process.env.INBOXED_POSTGRES_JS_PACKAGE;
  if (dir === undefined || dir === '') return { postgres: postgres3, major: 3 };
  const manifest = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { version: string; main?: string };
  const loaded = (await import(pathToFileURL(path.join(dir, manifest.main ?? 'index.js')).href)) as { default: typeof postgres3 };
  return { postgres: loaded.default, major: Number(manifest.version.split('.')[0]) };
}
const postgresJs = await loadPostgresJs();
export const postgres: typeof postgres3 = postgresJs.postgres;
/** The major version of {@link postgres}. */
export const POSTGRES_JS_MAJOR: number = postgresJs.major;

/** The Drizzle drivers inboxed supports; every core behaviour is proven on each. */
export type Driver = 'node-postgres' | 'postgres-js' | 'pglite';
const ALL_DRIVERS: readonly Driver[] = ['node-postgres', 'postgres-js', 'pglite'];
/**
 * The drivers this run proves behaviour on: all three, or those listed in `INBOXED_DRIVERS`
 * (the PostgreSQL version matrix runs the real-server drivers only; PGlite is one fixed version).
 */
export const DRIVERS: readonly Driver[] = process.env.INBOXED_DRIVERS
  ? ALL_DRIVERS.filter((driver) => process.env.INBOXED_DRIVERS!.split(',').includes(driver))
  : ALL_DRIVERS;

function effectsTableIn(schema: string) {
  // The "domain" table of the tests: one row per applied effect, so effects are counted, not guessed.
  return pgSchema(schema).table('effects', {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    messageId: text('message_id').notNull(),
    value: jsonb('value'),
    amount: integer('amount'),
  });
}

let sharedPglite: PGlite | undefined;

export type EffectsTable = ReturnType<typeof effectsTableIn>;

/** A database handle on a fresh schema of its own, dropped by `close()`. */
export interface TestDatabase {
  driver: Driver;
  /** Drizzle database, typed loosely so one suite runs on every driver. */
  db: any;
  /** The schema created for this test; pass it as `tables: { schema }`. */
  schema: string;
  /** `<schema>.effects`: the test's domain table. */
  effects: EffectsTable;
  /** Number of rows in `effects` (optionally for one message id). */
  countEffects(messageId?: string): Promise<number>;
  /**
   * Notices the server sent on this database's connections (`WARNING: ...`), on node-postgres and
   * postgres-js; always empty on PGlite.
   */
  notices: string[];
  /** Runs SQL and returns rows as plain objects, on any driver. */
  query<T = Record<string, unknown>>(text: string): Promise<T[]>;
  close(): Promise<void>;
}

/**
 * Opens the requested driver on a brand-new schema with an `effects` table. Real PostgreSQL for
 * `node-postgres` and `postgres-js` (the integration URL); in-process PGlite for `pglite`.
 */
export async function createTestDatabase(driver: Driver, options: { poolSize?: number; label?: string } = {}): Promise<TestDatabase> {
  const schema = uniqueName(options.label ?? 't');
  const poolSize = options.poolSize ?? 10;
  let db: any;
  let rawQuery: (text: string) => Promise<Record<string, unknown>[]>;
  let end: () => Promise<void>;
  const notices: string[] = [];
  if (driver === 'node-postgres') {
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: poolSize });
    pool.on('connect', (client) => client.on('notice', (notice) => notices.push(`${notice.severity}: ${notice.message}`)));
    db = drizzleNodePg(pool);
    rawQuery = async (text) => (await pool.query(text)).rows;
    end = () => pool.end();
  } else if (driver === 'postgres-js') {
    const client = postgres(databaseUrl(), { max: poolSize, onnotice: (notice) => notices.push(`${notice.severity}: ${notice.message}`) });
    db = drizzlePostgresJs(client);
    rawQuery = async (text) => [...(await client.unsafe(text))] as Record<string, unknown>[];
    end = () => client.end({ timeout: 5 });
  } else {
    // One embedded database per test worker (booting PGlite costs ~1 s); tests still get their own schema.
    sharedPglite ??= new PGlite();
    const client = sharedPglite;
    db = drizzlePglite(client);
    rawQuery = async (text) => (await client.query<Record<string, unknown>>(text)).rows;
    end = async () => {};
  }
  await rawQuery(`create schema "${schema}"`);
  await rawQuery(`create table "${schema}".effects (id bigserial primary key, message_id text not null, value jsonb, amount integer)`);
  const effects = effectsTableIn(schema);
  return {
    driver,
    db,
    schema,
    effects,
    async countEffects(messageId) {
      const where = messageId === undefined ? sql`true` : sql`${effects.messageId} = ${messageId}`;
      const rows = await db.select({ n: sql<number>`count(*)::int` }).from(effects).where(where);
      return Number(rows[0].n);
    },
    notices,
    query: rawQuery as TestDatabase['query'],
    async close() {
      try {
        await rawQuery(`drop schema "${schema}" cascade`);
      } finally {
        await end();
      }
    },
  };
}
