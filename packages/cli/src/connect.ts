import { type AnyPgDatabase, describeError, InboxError, InboxErrorCodes } from '@inboxed/core';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { CliErrorCodes } from './cli-errors.js';

/** An open database for one command. */
export interface Connection {
  /** Typed as core's database: the CLI's drizzle-orm and core's are one copy once installed, not always in a workspace. */
  db: AnyPgDatabase;
  close(): Promise<void>;
}

/** The URL without its password, for messages. */
export function redactUrl(url: URL): string {
  const copy = new URL(url.href);
  if (copy.password !== '') copy.password = '***';
  return copy.href;
}

/**
 * The database URL: `--database-url`, else `DATABASE_URL`. Missing is a usage error
 * (`DATABASE_URL_MISSING`); anything but a `postgres://` or `postgresql://` URL is `DATABASE_URL_INVALID`.
 */
export function resolveDatabaseUrl(flag: string | undefined, env: NodeJS.ProcessEnv): URL {
  const text = flag ?? env.DATABASE_URL;
  if (text === undefined || text.trim() === '') {
    throw new InboxError(CliErrorCodes.DATABASE_URL_MISSING, 'no database: pass --database-url postgres://user@host:5432/db or set DATABASE_URL');
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new InboxError(CliErrorCodes.DATABASE_URL_INVALID, 'the database URL is not a URL (expected postgres://user:password@host:5432/database)');
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new InboxError(CliErrorCodes.DATABASE_URL_INVALID, `the database URL must start with postgres:// or postgresql://, not ${url.protocol}//`);
  }
  return url;
}

/**
 * Opens a small node-postgres pool and proves it with `select 1`, so an unreachable server, wrong
 * credentials or a missing database fail here as `DATABASE_UNAVAILABLE` (exit 3), before any command runs.
 */
export async function connect(url: URL, options: { connectTimeoutMs?: number } = {}): Promise<Connection> {
  const pool = new pg.Pool({
    connectionString: url.href,
    max: 2,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 10_000,
    application_name: 'inboxed-cli',
  });
  // An idle client losing its connection must not crash the process; the next query reports it.
  pool.on('error', () => {});
  try {
    await pool.query('select 1');
  } catch (error) {
    await pool.end().catch(() => {});
    throw new InboxError(InboxErrorCodes.DATABASE_UNAVAILABLE, `cannot connect to ${redactUrl(url)}: ${describeError(error)}`, { cause: error });
  }
  return { db: drizzle(pool) as unknown as AnyPgDatabase, close: () => pool.end() };
}
