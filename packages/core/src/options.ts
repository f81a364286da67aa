import type { BackoffOptions } from './backoff.js';
import { isSingleNodePgClient } from './drivers/node-postgres.js';
import { refuseUnsupportedClient } from './drivers/postgres-js.js';
import { describeError } from './error-text.js';
import { InboxError, InboxErrorCodes } from './errors.js';
import type { FingerprintOption } from './fingerprint.js';
import { createInboxTables, type InboxTableNames, type InboxTables } from './schema.js';
import type { StandardSchemaV1 } from './standard-schema.js';
import type { AnyPgDatabase } from './types.js';
import { isWellFormed } from './unicode.js';

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
   * Validates the payload before any database work, with any Standard Schema validator (zod,
   * valibot, arktype, ...), and types it: the handler's `message.payload` is the schema's output.
   * Invalid payloads are dead-lettered with reason `validation-failed` (`VALIDATION_FAILED`, the
   * issues in `error.details.issues`): retrying a malformed message cannot help. The fingerprint is
   * taken from the payload as delivered, before validation. Use `schema` or `parse`, not both.
   *
   * ```ts
   * const Order = z.object({ id: z.string(), amountCents: z.number().int() });
   * withInbox(async (message, tx) => {
   *   message.payload.amountCents; // number
   * }, { db, consumer: 'billing', schema: Order });
   * ```
   */
  schema?: StandardSchemaV1<unknown, TPayload>;
  /**
   * Validates and converts the payload with a plain function (`Order.parse` of zod works as is); its
   * return type types the handler's payload. A throw or rejection dead-letters the message with
   * reason `validation-failed`. Use `schema` or `parse`, not both.
   */
  parse?: (payload: unknown) => TPayload | Promise<TPayload>;
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
  /**
   * How long a handler may run, in ms. At the deadline `context.signal` fires; when the handler
   * settles, its transaction is rolled back and the attempt counts as failed (`HANDLER_TIMEOUT`). A
   * handler that ignores the signal for another `handlerTimeoutMs` is abandoned: its transaction
   * ends and its later statements are refused (on node-postgres its connection is cut; on
   * postgres-js a statement of the handler's still running on the server, or a savepoint it still
   * has open, is waited for). It also bounds `schema` validation
   * and `parse`, which run before the transaction: one that has not settled by then dead-letters the
   * message (`validation-failed`). Default: no limit (`null`).
   *
   * The handler's `context.signal` is an `AbortSignal`: a listener you add to it that throws is
   * reported by Node as an uncaught exception (the EventTarget rule), which no library can catch.
   */
  handlerTimeoutMs?: number | null;
  /** Isolation level of the inbox transaction. Default: the database default (read committed). */
  isolationLevel?: 'read uncommitted' | 'read committed' | 'repeatable read' | 'serializable';
  /**
   * `'transactional'` (the default): the handler runs inside the inbox transaction, for effects in
   * this database. `'leased'` (see {@link LeasedInboxOptions}): for effects outside it.
   */
  mode?: 'transactional';
}

/**
 * Options of leased mode, for handlers whose effect is outside the database (a payment provider, an
 * email API): the claim commits first, with a lease on server time and a fencing token; the handler
 * runs outside any transaction with an idempotency key for the provider; the completion (and any
 * local follow-up writes) commits only while the claim is still this worker's.
 */
export interface LeasedInboxOptions<TDb extends AnyPgDatabase, TPayload = unknown> extends Omit<InboxOptions<TDb, TPayload>, 'mode'> {
  mode: 'leased';
  /**
   * How long a claim is this worker's without a `renewLease()`, in ms (server time). After it runs
   * out, another delivery of the message takes the claim over (`takeover: true`, a higher fencing
   * token) and this worker's completion is refused. Longer than the handler's usual run, shorter
   * than you are willing to wait after a crash. Default 30000.
   */
  leaseMs?: number;
}

/** @internal options with defaults applied. */
export interface ResolvedOptions<TDb extends AnyPgDatabase, TPayload> {
  db: TDb;
  consumer: string;
  tables: InboxTables;
  fingerprint: FingerprintOption;
  onPayloadMismatch: 'conflict' | 'duplicate';
  schema: StandardSchemaV1<unknown, TPayload> | undefined;
  parse: ((payload: unknown) => TPayload | Promise<TPayload>) | undefined;
  maxAttempts: number;
  backoff: BackoffOptions;
  isPermanent: (error: unknown) => boolean;
  lockTimeoutMs: number | null;
  transactionRetries: number;
  handlerTimeoutMs: number | null;
  isolationLevel: InboxOptions<TDb, TPayload>['isolationLevel'];
}

const PERMANENT_ERROR_NAMES = new Set(['ZodError', 'ValidationError']);

/** The isolation levels PostgreSQL accepts in `BEGIN ISOLATION LEVEL ...`; nothing else reaches the SQL. */
const ISOLATION_LEVELS = new Set(['read uncommitted', 'read committed', 'repeatable read', 'serializable']);
const FINGERPRINT_MODES = new Set(['auto', 'json', 'bytes']);
const JITTERS = new Set(['full', 'equal', 'none']);
/** PostgreSQL's largest `lock_timeout` (INT_MAX milliseconds), and the largest `integer` for attempts. */
const PG_INT_MAX = 2_147_483_647;

function invalid(message: string): never {
  throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, message);
}

const isInteger = (value: unknown, min: number, max: number): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max;

/** A string PostgreSQL stores unchanged: no NUL, no lone surrogate. */
export function isStorableText(value: string): boolean {
  return !value.includes('\u0000') && isWellFormed(value);
}

/** Copies and checks the backoff settings once, so a hostile getter or a NaN cannot reach `retryAfterMs`. */
function resolveBackoff(backoff: unknown): BackoffOptions {
  if (backoff === undefined) return {};
  if (backoff === null || typeof backoff !== 'object') invalid('options.backoff must be an object');
  let baseDelayMs: unknown, maxDelayMs: unknown, jitter: unknown;
  try {
    ({ baseDelayMs, maxDelayMs, jitter } = backoff as BackoffOptions);
  } catch (error) {
    invalid(`options.backoff cannot be read: ${describeError(error)}`);
  }
  const delay = (value: unknown, name: string) => {
    if (value !== undefined && !(typeof value === 'number' && Number.isFinite(value) && value >= 0))
      invalid(`options.backoff.${name} must be a finite number >= 0`);
  };
  delay(baseDelayMs, 'baseDelayMs');
  delay(maxDelayMs, 'maxDelayMs');
  if (jitter !== undefined && !JITTERS.has(jitter as string)) invalid("options.backoff.jitter must be 'full', 'equal' or 'none'");
  return { baseDelayMs, maxDelayMs, jitter } as BackoffOptions;
}

/** @internal validates options once, at construction, so misconfiguration fails fast and loudly. */
export function resolveOptions<TDb extends AnyPgDatabase, TPayload>(
  options: InboxOptions<TDb, TPayload> | LeasedInboxOptions<TDb, TPayload>,
): ResolvedOptions<TDb, TPayload> {
  if (options === null || typeof options !== 'object') invalid('options are required');
  const { mode } = options as { mode?: unknown };
  if (mode !== undefined && mode !== 'transactional' && mode !== 'leased') invalid("options.mode must be 'transactional' or 'leased'");
  const { db, consumer } = options;
  if (db === null || typeof db !== 'object' || typeof (db as { transaction?: unknown }).transaction !== 'function') {
    invalid('options.db must be a Drizzle PostgreSQL database (node-postgres, postgres-js or PGlite)');
  }
  if (typeof (db as { rollback?: unknown }).rollback === 'function') {
    // A Drizzle transaction (PgTransaction has rollback(), a database has not): inboxed's COMMIT
    // would only release a savepoint, and `processed` would be reported while the effect could
    // still roll back with the caller's transaction.
    invalid(
      'options.db is a Drizzle transaction: inboxed must own the transaction that commits the claim with the effect, ' +
        'or a message could be acked as processed and then rolled back with yours. Pass the database itself.',
    );
  }
  if (isSingleNodePgClient(db)) {
    invalid(
      'options.db is a Drizzle database over a single node-postgres Client: concurrent deliveries would share one ' +
        "server transaction (one's ROLLBACK would discard another's committed effect), and a lost connection never comes back. " +
        'Pass a Pool instead: drizzle(new Pool({ connectionString })).',
    );
  }
  refuseUnsupportedClient(db, 'options.db');
  if (typeof consumer !== 'string' || consumer.trim() === '' || Buffer.byteLength(consumer) > 200 || !isStorableText(consumer)) {
    invalid('options.consumer must be a non-empty string of at most 200 bytes, without NUL or lone surrogates');
  }
  const maxAttempts = options.maxAttempts ?? 5;
  if (!isInteger(maxAttempts, 1, PG_INT_MAX)) invalid(`options.maxAttempts must be an integer from 1 to ${PG_INT_MAX}`);
  const lockTimeoutMs = options.lockTimeoutMs === undefined ? 5000 : options.lockTimeoutMs;
  if (lockTimeoutMs !== null && !isInteger(lockTimeoutMs, 1, PG_INT_MAX)) {
    invalid(`options.lockTimeoutMs must be an integer from 1 to ${PG_INT_MAX} (milliseconds), or null`);
  }
  const transactionRetries = options.transactionRetries ?? 5;
  if (!isInteger(transactionRetries, 0, 100)) invalid('options.transactionRetries must be an integer from 0 to 100');
  const handlerTimeoutMs = options.handlerTimeoutMs ?? null;
  if (handlerTimeoutMs !== null && !isInteger(handlerTimeoutMs, 1, PG_INT_MAX))
    invalid(`options.handlerTimeoutMs must be an integer from 1 to ${PG_INT_MAX} (milliseconds), or null`);
  const { isolationLevel } = options;
  if (isolationLevel !== undefined && !ISOLATION_LEVELS.has(isolationLevel)) {
    invalid(`options.isolationLevel must be one of ${[...ISOLATION_LEVELS].map((l) => `'${l}'`).join(', ')}`);
  }
  const fingerprint = options.fingerprint ?? 'auto';
  if (fingerprint !== false && typeof fingerprint !== 'function' && !FINGERPRINT_MODES.has(fingerprint)) {
    invalid("options.fingerprint must be 'auto', 'json', 'bytes', false or a function");
  }
  const onPayloadMismatch = options.onPayloadMismatch ?? 'conflict';
  if (onPayloadMismatch !== 'conflict' && onPayloadMismatch !== 'duplicate') invalid("options.onPayloadMismatch must be 'conflict' or 'duplicate'");
  const { schema } = options;
  if (schema !== undefined && typeof (schema as Partial<StandardSchemaV1>)?.['~standard']?.validate !== 'function') {
    invalid("options.schema must be a Standard Schema validator (an object with '~standard'.validate): zod, valibot, arktype, ...");
  }
  if (schema !== undefined && options.parse !== undefined) invalid('options.schema and options.parse validate the same payload: give one of them');
  for (const name of ['parse', 'isPermanent'] as const) {
    if (options[name] !== undefined && typeof options[name] !== 'function') invalid(`options.${name} must be a function`);
  }
  if (options.tables !== undefined && (options.tables === null || typeof options.tables !== 'object'))
    invalid('options.tables must be { schema, table } or createInboxTables(...)');
  const tables = options.tables !== undefined && 'inbox' in options.tables ? options.tables : createInboxTables(options.tables);
  const userIsPermanent = options.isPermanent;
  return {
    db,
    consumer,
    tables,
    fingerprint,
    onPayloadMismatch,
    schema,
    parse: options.parse,
    maxAttempts,
    backoff: resolveBackoff(options.backoff),
    isPermanent: (error) => (error instanceof Error && PERMANENT_ERROR_NAMES.has(error.name)) || (userIsPermanent?.(error) ?? false),
    lockTimeoutMs,
    transactionRetries,
    handlerTimeoutMs,
    isolationLevel,
  };
}

/** @internal Throws `INVALID_OPTIONS` unless `handler` is a function. */
export function assertHandler(handler: unknown): void {
  if (typeof handler !== 'function') invalid(`the handler must be a function, got ${handler === null ? 'null' : typeof handler}`);
}

/** @internal `leaseMs` of leased mode, checked: an integer from 100 ms to 24 h. */
export function resolveLeaseMs(options: { leaseMs?: unknown }): number {
  const leaseMs = options.leaseMs ?? 30_000;
  if (!isInteger(leaseMs, 100, 86_400_000)) invalid('options.leaseMs must be an integer from 100 to 86400000 (milliseconds)');
  return leaseMs;
}
