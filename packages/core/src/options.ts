import type { BackoffOptions } from './backoff.js';
import { InboxError, InboxErrorCodes } from './errors.js';
import type { FingerprintOption } from './fingerprint.js';
import { createInboxTables, type InboxTableNames, type InboxTables } from './schema.js';
import type { AnyPgDatabase, InboxMessage } from './types.js';

/** Options shared by {@link withInbox} and {@link withInboxBatch}. */
export interface InboxOptions<TDb extends AnyPgDatabase, TPayload = unknown> {
  /** Your Drizzle PostgreSQL database (node-postgres, postgres-js or PGlite driver). */
  db: TDb;
  /**
   * The dedup scope, usually the consuming service and purpose (`billing.order-created`). Two
   * consumers of the same message each process it once; one consumer never twice.
   */
  consumer: string;
  /**
   * The inbox tables: names (`{ schema, table }`) or the tables returned by `createInboxTables()`.
   * Default `public.inbox` / `public.inbox_attempts`.
   */
  tables?: InboxTableNames | InboxTables;
  /** How payloads are fingerprinted to catch an id reused with another payload. Default `'auto'`; see {@link FingerprintOption}. */
  fingerprint?: FingerprintOption;
  /**
   * What a known id with a different fingerprint becomes. `'conflict'` (default): status
   * `conflict`, reason `payload-mismatch`, and adapters dead-letter it. `'duplicate'`: acked as a
   * duplicate that still carries reason `payload-mismatch` and the error, for producers known to
   * add volatile fields you could not exclude with a fingerprint function.
   */
  onPayloadMismatch?: 'conflict' | 'duplicate';
  /**
   * Validates and converts the payload before any database work (e.g. `schema.parse`). A throw
   * dead-letters the message with reason `validation-failed`: retrying a malformed message cannot help.
   */
  parse?: (payload: unknown, message: InboxMessage) => TPayload;
  /** Attempts (including the first) before a failing message is dead-lettered. Default 5. */
  maxAttempts?: number;
  /** Backoff between attempts, reported as `retryAfterMs`. Default 1 s doubling to 5 min, full jitter. */
  backoff?: BackoffOptions;
  /**
   * Marks handler errors that retrying cannot fix, in addition to `PermanentError`. Default: errors
   * named `ZodError` or `ValidationError` are permanent, everything else is retried.
   */
  isPermanent?: (error: unknown) => boolean;
  /**
   * How long a concurrent copy waits for the copy holding the same inbox row before giving up with
   * `retry` (reason `in-progress`). Set as `lock_timeout` for the transaction. Default 5000 ms;
   * `null` leaves the session's own `lock_timeout` alone.
   */
  lockTimeoutMs?: number | null;
  /** Transparent re-runs of a transaction hit by a serialization failure or deadlock. Default 5. */
  transactionRetries?: number;
  /** Isolation level of the inbox transaction. Default: the database default (read committed). */
  isolationLevel?: 'read committed' | 'repeatable read' | 'serializable';
}

/** @internal options with defaults applied. */
export interface ResolvedOptions<TDb extends AnyPgDatabase, TPayload> {
  db: TDb;
  consumer: string;
  tables: InboxTables;
  fingerprint: FingerprintOption;
  onPayloadMismatch: 'conflict' | 'duplicate';
  parse: ((payload: unknown, message: InboxMessage) => TPayload) | undefined;
  maxAttempts: number;
  backoff: BackoffOptions;
  isPermanent: (error: unknown) => boolean;
  lockTimeoutMs: number | null;
  transactionRetries: number;
  isolationLevel: InboxOptions<TDb, TPayload>['isolationLevel'];
}

const PERMANENT_ERROR_NAMES = new Set(['ZodError', 'ValidationError']);

function invalid(message: string): never {
  throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, message);
}

/** @internal validates options once, at construction, so misconfiguration fails fast and loudly. */
export function resolveOptions<TDb extends AnyPgDatabase, TPayload>(options: InboxOptions<TDb, TPayload>): ResolvedOptions<TDb, TPayload> {
  if (options === null || typeof options !== 'object') invalid('options are required');
  const { db, consumer } = options;
  if (db === null || typeof db !== 'object' || typeof (db as { transaction?: unknown }).transaction !== 'function') {
    invalid('options.db must be a Drizzle PostgreSQL database (node-postgres, postgres-js or PGlite)');
  }
  if (typeof consumer !== 'string' || consumer.trim() === '' || Buffer.byteLength(consumer) > 200) {
    invalid('options.consumer must be a non-empty string of at most 200 bytes');
  }
  const maxAttempts = options.maxAttempts ?? 5;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) invalid('options.maxAttempts must be an integer >= 1');
  const lockTimeoutMs = options.lockTimeoutMs === undefined ? 5000 : options.lockTimeoutMs;
  if (lockTimeoutMs !== null && (!Number.isInteger(lockTimeoutMs) || lockTimeoutMs < 1)) {
    invalid('options.lockTimeoutMs must be a positive integer (milliseconds) or null');
  }
  const transactionRetries = options.transactionRetries ?? 5;
  if (!Number.isInteger(transactionRetries) || transactionRetries < 0) invalid('options.transactionRetries must be an integer >= 0');
  const tables = options.tables !== undefined && 'inbox' in options.tables ? options.tables : createInboxTables(options.tables);
  const userIsPermanent = options.isPermanent;
  return {
    db,
    consumer,
    tables,
    fingerprint: options.fingerprint ?? 'auto',
    onPayloadMismatch: options.onPayloadMismatch ?? 'conflict',
    parse: options.parse,
    maxAttempts,
    backoff: options.backoff ?? {},
    isPermanent: (error) =>
      (error instanceof Error && PERMANENT_ERROR_NAMES.has(error.name)) || (userIsPermanent?.(error) ?? false),
    lockTimeoutMs,
    transactionRetries,
    isolationLevel: options.isolationLevel,
  };
}
