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

/** @internal Throws `INVALID_OPTIONS` when `db` is a postgres-js client inboxed cannot read through (see {@link unsupportedPostgresJsSetting}). */
export function refuseUnsupportedClient(db: unknown, operation: string): void {
  const unsupported = unsupportedPostgresJsSetting(db);
  if (unsupported !== undefined) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `${operation}: ${unsupported}`);
}
