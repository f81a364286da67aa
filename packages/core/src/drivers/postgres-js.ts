import { InboxError, InboxErrorCodes } from '../errors.js';

/** The parts of a postgres-js `sql` instance inboxed looks at (`db.$client`), duck-typed: core loads no driver it does not need. */
interface PostgresJsClient {
  unsafe: unknown;
  begin: unknown;
  options?: {
    fetch_types?: unknown;
    transform?: { column?: { from?: unknown }; value?: { from?: unknown }; row?: { from?: unknown } };
  };
}

/** @internal The postgres-js client behind a Drizzle database, or undefined for any other driver. */
export function postgresJsClient(db: unknown): PostgresJsClient | undefined {
  // A postgres-js `sql` is a function (the tagged template) carrying its methods.
  const client: unknown = (db as { $client?: unknown } | null)?.$client;
  if (typeof client !== 'function') return undefined;
  const { unsafe, begin } = client as unknown as Partial<PostgresJsClient>;
  return typeof unsafe === 'function' && typeof begin === 'function' ? (client as unknown as PostgresJsClient) : undefined;
}

/**
 * @internal Why inboxed cannot work through this postgres-js client, or undefined when it can.
 * inboxed reads its own statements' rows by column name and sends id lists as arrays:
 * - a `transform` of columns, values or rows (`postgres.camel`, `{ column: { from: toCamel } }`)
 *   renames or rewrites what the inbox's statements return: every claim then looked lost, and every
 *   delivery was retried for ever, uncounted;
 * - `fetch_types: false` leaves postgres-js without the array types, and every duplicate check and
 *   batch failed (22P02), again retried for ever.
 */
export function unsupportedPostgresJsSetting(db: unknown): string | undefined {
  const options = postgresJsClient(db)?.options;
  if (options === undefined) return undefined;
  const { transform } = options;
  for (const part of ['column', 'value', 'row'] as const) {
    if (typeof transform?.[part]?.from === 'function') {
      return `the postgres-js client transforms ${part}s it returns (transform.${part}): inboxed reads its own rows by their names and values. Use a client without a transform for inboxed (a second postgres() over the same database is fine), or transform in your own code`;
    }
  }
  if (options.fetch_types === false) {
    return 'the postgres-js client was created with fetch_types: false: inboxed sends id lists as arrays, which need the array types postgres-js fetches. Leave fetch_types on';
  }
  return undefined;
}

/**
 * True for a Drizzle transaction over postgres-js passed where a database goes: its scoped `sql`
 * (`unsafe`, `savepoint`, no `end`; 4.x gives it a `begin` for nested transactions) does not carry
 * the client's options, so a `transform` or `fetch_types: false` cannot be seen through it.
 */
function isPostgresJsTransaction(db: unknown): boolean {
  const client: unknown = (db as { session?: { client?: unknown } } | null)?.session?.client;
  if (typeof client !== 'function') return false;
  const { unsafe, savepoint, end } = client as unknown as Record<string, unknown>;
  return typeof unsafe === 'function' && typeof savepoint === 'function' && typeof end !== 'function';
}

/**
 * @internal Throws `INVALID_OPTIONS` when `db` is a postgres-js client inboxed cannot read through
 * (see {@link unsupportedPostgresJsSetting}), or a postgres-js transaction, whose client's settings
 * cannot be checked (the operations functions read rows by name: pass them the database).
 */
export function refuseUnsupportedClient(db: unknown, operation: string): void {
  const unsupported =
    unsupportedPostgresJsSetting(db) ??
    (isPostgresJsTransaction(db)
      ? "db is a transaction of a postgres-js client, whose settings (a transform, fetch_types) cannot be checked through it; pass the Drizzle database itself: inboxed's operations run their own statements"
      : undefined);
  if (unsupported !== undefined) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `${operation}: ${unsupported}`);
}
