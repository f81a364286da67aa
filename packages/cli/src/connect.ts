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

/** A database URL: the text node-postgres parses, and the same URL with every password masked, for messages. */
export interface DatabaseUrl {
  connectionString: string;
  redacted: string;
}

/** Query parameters that carry a secret: node-postgres reads `password` there; `sslpassword` is libpq's key passphrase. */
const SECRET_PARAMETERS = new Set(['password', 'sslpassword']);

/** The URL with its passwords masked, for messages: `user:***@` and `?password=***` (also `sslpassword`). */
export function redactUrl(url: URL): string {
  const copy = new URL(url.href);
  if (copy.password !== '') copy.password = '***';
  if (copy.search.length > 1) {
    // Edited as text, so the other parameters are printed exactly as given (searchParams would re-encode them).
    const parameters = copy.search.slice(1).split('&');
    copy.search = parameters
      .map((parameter) => {
        const [name = '', ...value] = parameter.split('=');
        return value.length > 0 && SECRET_PARAMETERS.has(decodeParameter(name).toLowerCase()) ? `${name}=***` : parameter;
      })
      .join('&');
  }
  return copy.href;
}

function decodeParameter(name: string): string {
  try {
    return decodeURIComponent(name.replaceAll('+', ' '));
  } catch {
    return name;
  }
}

/** Stands in for the empty host of `postgres://user@/db?host=/var/run/postgresql`, which WHATWG URLs refuse. */
const EMPTY_HOST = 'inboxed-cli-empty-host';

/**
 * The database URL: `--database-url`, else `DATABASE_URL`. Missing is a usage error
 * (`DATABASE_URL_MISSING`); anything but a `postgres://` or `postgresql://` URL is `DATABASE_URL_INVALID`.
 * Accepted as node-postgres accepts them, including libpq's form with the host (a Unix socket
 * directory) as a query parameter and user info before an empty host: `postgres://user@/db?host=/var/run/postgresql`.
 */
export function resolveDatabaseUrl(flag: string | undefined, env: NodeJS.ProcessEnv): DatabaseUrl {
  const text = flag ?? env.DATABASE_URL;
  if (text === undefined || text.trim() === '') {
    throw new InboxError(CliErrorCodes.DATABASE_URL_MISSING, 'no database: pass --database-url postgres://user@host:5432/db or set DATABASE_URL');
  }
  const { url, emptyHost } = parseUrl(text.trim());
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new InboxError(CliErrorCodes.DATABASE_URL_INVALID, `the database URL must start with postgres:// or postgresql://, not ${url.protocol}//`);
  }
  const redacted = redactUrl(url);
  return { connectionString: text.trim(), redacted: emptyHost ? redacted.replace(`@${EMPTY_HOST}/`, '@/') : redacted };
}

/** `new URL(text)`, or, as node-postgres does, again with a stand-in for an empty host after user info. */
function parseUrl(text: string): { url: URL; emptyHost: boolean } {
  try {
    return { url: new URL(text), emptyHost: false };
  } catch {
    // Not a URL as it stands; node-postgres (pg-connection-string) retries `user@/db` with a dummy host.
  }
  try {
    if (text.includes('@/')) return { url: new URL(text.replace('@/', `@${EMPTY_HOST}/`)), emptyHost: true };
  } catch {
    // Not a URL either way.
  }
  throw new InboxError(CliErrorCodes.DATABASE_URL_INVALID, 'the database URL is not a URL (expected postgres://user:password@host:5432/database)');
}

/**
 * Opens a small node-postgres pool and proves it with `select 1`, so an unreachable server, wrong
 * credentials or a missing database fail here as `DATABASE_UNAVAILABLE` (exit 3), before any command runs.
 */
export async function connect(url: DatabaseUrl, options: { connectTimeoutMs?: number } = {}): Promise<Connection> {
  const pool = new pg.Pool({
    connectionString: url.connectionString,
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
    throw new InboxError(InboxErrorCodes.DATABASE_UNAVAILABLE, `cannot connect to ${url.redacted}: ${describeError(error)}`, { cause: error });
  }
  return { db: drizzle(pool) as unknown as AnyPgDatabase, close: () => pool.end() };
}
