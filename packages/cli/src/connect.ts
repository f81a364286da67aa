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
  // Edited as text, so the other parameters are printed exactly as given (searchParams would re-encode them).
  if (copy.search.length > 1) copy.search = maskQuery(copy.search.slice(1));
  return copy.href;
}

/** A query string (without its `?`) with the values of its secret parameters masked. */
function maskQuery(query: string): string {
  return query
    .split('&')
    .map((parameter) => {
      const [name = '', ...value] = parameter.split('=');
      return value.length > 0 && SECRET_PARAMETERS.has(decodeParameter(name).toLowerCase()) ? `${name}=***` : parameter;
    })
    .join('&');
}

/**
 * One URL-like text (`scheme://...`) masked as {@link redactUrl} masks a URL, but edited as text, so
 * it works on what does not parse too: the password of its user info (from the first `:` to the last
 * `@` of the authority) and the values of `password`/`sslpassword` query parameters. `wholeArgument`:
 * the text is one command-line argument, whose user info may hold an unencoded `/`, `?` or `#`, so
 * it runs to the argument's last `@` (masking too much there is better than too little).
 */
function maskUrlText(text: string, wholeArgument: boolean): string {
  const start = text.indexOf('://') + 3;
  const rest = text.slice(start);
  const delimiter = rest.search(/[/?#]/);
  const lastAt = rest.lastIndexOf('@');
  const authorityEnd = wholeArgument && lastAt !== -1 ? lastAt + 1 : delimiter === -1 ? rest.length : delimiter;
  let authority = rest.slice(0, authorityEnd);
  const at = authority.lastIndexOf('@');
  const colon = authority.indexOf(':');
  if (at !== -1 && colon !== -1 && colon < at - 1) authority = `${authority.slice(0, colon + 1)}***${authority.slice(at)}`;
  let tail = rest.slice(authorityEnd);
  const hash = tail.indexOf('#');
  const query = tail.indexOf('?');
  if (query !== -1 && (hash === -1 || query < hash)) {
    const queryEnd = hash === -1 ? tail.length : hash;
    tail = `${tail.slice(0, query + 1)}${maskQuery(tail.slice(query + 1, queryEnd))}${tail.slice(queryEnd)}`;
  }
  return `${text.slice(0, start)}${authority}${tail}`;
}

/** In free text: a URL-like token (up to a space or quote), and `password=`/`sslpassword=` (not part of a longer word) with its value. */
const TEXT_SECRETS = { url: /[a-z][a-z0-9+.-]*:\/\/[^\s'"`<>]*/gi, keyword: /(^|[^a-z0-9_%])((?:ssl)?password=)[^\s&#'"`]*/gi, wholeArgument: false };
/** In one command-line argument: the same, but a URL runs to the argument's end and a value to the next `&` or `#`. */
const ARGUMENT_SECRETS = { url: /[a-z][a-z0-9+.-]*:\/\/.*/gis, keyword: /(^|[^a-z0-9_%])((?:ssl)?password=)[^&#]*/gi, wholeArgument: true };

function maskSecrets(text: string, patterns: typeof TEXT_SECRETS): string {
  return text
    .replace(patterns.url, (url) => maskUrlText(url, patterns.wholeArgument))
    .replace(patterns.keyword, (_match, before: string, key: string) => `${before}${key}***`);
}

/**
 * Free text (an error message) with every secret it may quote masked as {@link redactUrl} masks a
 * database URL: `user:***@` in anything like a URL, `password=***` and `sslpassword=***` (in a URL's
 * query or on their own, as in a mistyped `--password=...`). Commander's usage errors quote the
 * arguments as given (`unknown option '--database_url=postgres://u:p@h/db'`), so each of `argv` that
 * holds a secret is first replaced whole by its masked form: that also covers passwords with quotes or
 * spaces in them, which the scan of the text alone would cut short.
 */
export function redactSecrets(text: string, argv: readonly string[] = []): string {
  let result = text;
  for (const argument of argv) {
    const masked = maskSecrets(argument, ARGUMENT_SECRETS);
    if (masked !== argument) result = result.replaceAll(argument, masked);
  }
  return maskSecrets(result, TEXT_SECRETS);
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
