import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type { InboxError } from './errors.js';

/**
 * Any Drizzle PostgreSQL database: `drizzle-orm/node-postgres`, `drizzle-orm/postgres-js` or
 * `drizzle-orm/pglite`. inboxed uses only `transaction()`, `insert()`, `select()`, `update()` and
 * `delete()` on it, so your own instance (with your own schema) is passed straight through.
 */
// biome-ignore lint/suspicious/noExplicitAny: any driver's query-result type and any user schema must be accepted.
export type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;

/** The transaction type of a Drizzle database: what `db.transaction(async (tx) => ...)` hands you. */
// (An untyped `any` database yields an untyped transaction rather than `never`.)
// biome-ignore lint/suspicious/noExplicitAny: mirrors an untyped database's transaction as untyped.
export type TransactionOf<TDb extends AnyPgDatabase> = 0 extends 1 & TDb ? any : Parameters<Parameters<TDb['transaction']>[0]>[0];

/** One delivery of a message, in the broker-neutral shape adapters produce. */
export interface InboxMessage<TPayload = unknown> {
  /**
   * The producer's stable id of the logical message. Redeliveries and producer retries must carry
   * the same id: a broker delivery tag or receipt handle is never a message id.
   * At most 512 bytes of UTF-8.
   */
  id: string;
  /** The decoded body: a JSON value, or a `Uint8Array`/`Buffer` for non-JSON bodies. */
  payload: TPayload;
  /** Transport headers or attributes, for the handler's information. Not fingerprinted. */
  headers?: Record<string, unknown>;
  /**
   * The delivery attempt as the broker counts it (1 = first delivery), when the broker knows; a
   * positive integer. Handed to the handler as `context.attempt`. `maxAttempts` is decided by the
   * durable count of failed attempts in the database, not by this number (a broker also counts
   * redeliveries caused by outages); it is used only if that count cannot be written.
   */
  attempt?: number;
  /** When the consumer received the message (a valid `Date`, years 1 to 9999). Defaults to the database's `now()`. */
  receivedAt?: Date;
  /** Where the message came from (`amqp:orders`, `kafka:payments/3`), stored with the inbox row. At most 1024 bytes, no NUL. */
  source?: string;
  /**
   * True when this delivery may follow one that started and never ended: the process handling it
   * died or was killed (the AMQP `redelivered` flag, an SQS receive count above 1, the first records
   * of a Kafka partition after it was assigned). Its attempt is then counted before the handler runs
   * and taken back if it ends without failing, so a message that kills the process every time is
   * dead-lettered after `maxAttempts` (`MAX_ATTEMPTS_EXCEEDED`) instead of coming back for ever. It
   * costs two short statements; a batch holding such a message runs its messages one at a time.
   */
  redelivered?: boolean;
}

/**
 * What the adapter must do: ack (`processed`, `duplicate`, `rejected`), redeliver later (`retry`,
 * `busy`), or dead-letter (`dead-letter`, `conflict`).
 */
export type InboxStatus = InboxOutcome['status'];

/**
 * Stable reasons attached to outcomes. Adapters copy them into dead-letter headers, so they never
 * change spelling. Adapters may add their own (e.g. `unparseable-body`).
 */
export const OutcomeReasons = {
  /** `conflict`: the id is known with a different payload fingerprint. */
  PAYLOAD_MISMATCH: 'payload-mismatch',
  /** `dead-letter`: the message had no id. */
  MISSING_MESSAGE_ID: 'missing-message-id',
  /** `dead-letter`: the id was not a string, not well-formed UTF-16, contained NUL, or was over 512 bytes. */
  INVALID_MESSAGE_ID: 'invalid-message-id',
  /** `dead-letter`: another field of the delivery was malformed (`source`, `receivedAt`, `attempt`). */
  INVALID_MESSAGE: 'invalid-message',
  /** `dead-letter`: the payload could not be fingerprinted. */
  UNFINGERPRINTABLE_PAYLOAD: 'unfingerprintable-payload',
  /** `dead-letter`: the `parse` option rejected the payload. */
  VALIDATION_FAILED: 'validation-failed',
  /** `dead-letter`: the handler threw a permanent error. */
  PERMANENT_FAILURE: 'permanent-failure',
  /** `dead-letter`: the handler failed `maxAttempts` times. */
  MAX_ATTEMPTS_EXCEEDED: 'max-attempts-exceeded',
  /** `retry`: the handler threw a retryable error. */
  HANDLER_FAILED: 'handler-failed',
  /** `retry`: the database was unreachable or timed out. */
  DATABASE_UNAVAILABLE: 'database-unavailable',
  /** `retry`: a concurrent copy held the inbox row longer than `lockTimeoutMs`. */
  IN_PROGRESS: 'in-progress',
  /** `retry`: the handler failed after the consumer began to stop (its signal fired), or was not started once it had; not counted. */
  CONSUMER_STOPPING: 'consumer-stopping',
  /** `retry`: serialization failures or deadlocks outlasted the transparent retries. */
  TRANSACTION_CONFLICT: 'transaction-conflict',
  /** `retry`: the inbox tables are missing; nothing can be deduplicated until they are migrated. */
  INBOX_TABLE_MISSING: 'inbox-table-missing',
  /** `retry`: an inbox statement failed for another reason than an outage (permissions, a changed table). */
  INBOX_QUERY_FAILED: 'inbox-query-failed',
  /** `retry`: inboxed itself failed unexpectedly (a bug); not counted. */
  INTERNAL_ERROR: 'internal-error',
  /** `retry`: a processor threw instead of resolving to an outcome (a wrapper's bug); not counted. */
  PROCESSOR_THREW: 'processor-threw',
  /** `duplicate`: a second copy of the same id inside one batch. */
  DUPLICATE_IN_BATCH: 'duplicate-in-batch',
  /** `busy` (leased mode): another worker holds a live lease on this message. */
  LEASE_HELD: 'lease-held',
  /** `retry` (leased mode): this worker's lease was taken over before it completed; the completion was fenced off. Not counted. */
  LEASE_LOST: 'lease-lost',
  /** `dead-letter`: a leased claim of another mode is in the way (a transactional processor found a leased claim it cannot take over). */
  MODE_MISMATCH: 'mode-mismatch',
} as const;

/** A reason from {@link OutcomeReasons}, a business rejection reason, or an adapter's reason. */
export type OutcomeReason = (typeof OutcomeReasons)[keyof typeof OutcomeReasons] | (string & {});

/**
 * Fields every outcome may carry. Which of them are always present depends on `status`; narrow on it
 * (see {@link InboxOutcome}) and TypeScript knows, e.g., that a `retry` has `retryAfterMs`.
 */
export interface OutcomeFields {
  /** The message id (as received, or a printable form of an invalid one). */
  messageId: string;
  /** The consumer (dedup scope) that processed it. */
  consumer: string;
  /** Why: a stable {@link OutcomeReason}, or the business reason given to `reject()`. */
  reason?: OutcomeReason;
  /** The error behind a `retry`, `dead-letter` or `conflict` (also on a `duplicate` accepted despite a payload mismatch). */
  error?: InboxError;
  /** The attempt this outcome concerns: the durable count of failures for counted failures, else the broker's delivery count. */
  attempt?: number;
  /** For `retry`: how long to wait before the next attempt (exponential backoff, full jitter). For `busy`: the time left on the other worker's lease. */
  retryAfterMs?: number;
  /**
   * For `processed` and `duplicate`: the result the handler stored with `storeResult(value)` when the
   * message was completed, parsed back from JSON (every later duplicate gets the same result).
   */
  result?: unknown;
  /** Leased mode: the fencing token of this attempt's claim (1 for the first claim, +1 on every later one). */
  fencingToken?: number;
  /** Leased mode: true when this attempt took over a claim whose lease expired without completing. */
  takeover?: boolean;
  /** First failed attempt, when failures were recorded (for dead-letter headers). */
  firstAttemptAt?: Date;
  /** Latest failed attempt, when failures were recorded. */
  lastAttemptAt?: Date;
}

/** `processed`: the handler's effect committed together with the inbox row. Ack. */
export interface ProcessedOutcome extends OutcomeFields {
  status: 'processed';
}

/**
 * `duplicate`: this consumer already completed the id; the handler did not run. Ack. `reason` is the
 * stored rejection reason, `duplicate-in-batch`, or `payload-mismatch` (with `error`) when
 * `onPayloadMismatch: 'duplicate'` accepted a different payload.
 */
export interface DuplicateOutcome extends OutcomeFields {
  status: 'duplicate';
}

/** `rejected`: the handler returned `reject(reason)`; recorded as completed. Ack. */
export interface RejectedOutcome extends OutcomeFields {
  status: 'rejected';
  reason: string;
}

/** `retry`: redeliver after `retryAfterMs`. `reason` says whether it was counted (`handler-failed`) or not. */
export interface RetryOutcome extends OutcomeFields {
  status: 'retry';
  reason: OutcomeReason;
  error: InboxError;
  retryAfterMs: number;
}

/**
 * `busy` (leased mode): another worker holds a live lease on this message. Not now: redeliver after
 * `retryAfterMs` (the time left on that lease, bounded), without counting an attempt; never ack or
 * dead-letter it.
 */
export interface BusyOutcome extends OutcomeFields {
  status: 'busy';
  reason: OutcomeReason;
  retryAfterMs: number;
}

/** `dead-letter`: retrying cannot help; dead-letter with `reason` and `error`, then ack. */
export interface DeadLetterOutcome extends OutcomeFields {
  status: 'dead-letter';
  reason: OutcomeReason;
  error: InboxError;
}

/** `conflict`: the id is known with a different payload (`payload-mismatch`); dead-letter, then ack. */
export interface ConflictOutcome extends OutcomeFields {
  status: 'conflict';
  reason: OutcomeReason;
  error: InboxError;
}

/**
 * What became of one delivery, discriminated by `status`. Adapters act on `status`; everything else
 * is for logs and headers. Narrowing gives the fields a status always has:
 *
 * ```ts
 * if (outcome.status === 'retry') setTimeout(redeliver, outcome.retryAfterMs);
 * if (outcome.status === 'dead-letter') log.warn(outcome.reason, outcome.error.code);
 * ```
 */
export type InboxOutcome = ProcessedOutcome | DuplicateOutcome | RejectedOutcome | RetryOutcome | BusyOutcome | DeadLetterOutcome | ConflictOutcome;

/** A stable business rejection returned by a handler; see {@link reject}. */
export interface Rejection {
  readonly kind: 'inboxed.rejection';
  readonly reason: string;
}

/**
 * Return `reject(reason)` from a handler for a stable business outcome ("insufficient funds"):
 * the message is recorded as completed with status `rejected`, acked, and later redeliveries are
 * acked without running the handler again. Any writes the handler made in `tx` still commit.
 */
export function reject(reason: string): Rejection {
  return { kind: 'inboxed.rejection', reason };
}

/** True when a handler's return value is a {@link Rejection}. */
export function isRejection(value: unknown): value is Rejection {
  return typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === 'inboxed.rejection';
}

/** Context handed to a handler next to the message and the transaction. */
export interface HandlerContext {
  /** The consumer (dedup scope). */
  consumer: string;
  /** The broker's delivery attempt (1 when unknown). */
  attempt: number;
  /**
   * Fires when the handler should stop: at `handlerTimeoutMs`, or when the consumer is stopping.
   * Pass it on (`fetch(url, { signal })`) and return soon after it fires. A handler that times out
   * is a counted failure (`HANDLER_TIMEOUT`) whatever it returns: its transaction is rolled back.
   */
  signal: AbortSignal;
}

/** What a broker adapter passes with a delivery. */
export interface ProcessOptions {
  /**
   * Fires when the consumer stops; handed to the handler through `context.signal`. A handler that
   * fails once it fired is retried without counting an attempt (`CONSUMER_STOPPING`), so pass only a
   * signal that means "stopping", never a deadline of your own (that is `handlerTimeoutMs`).
   */
  signal?: AbortSignal;
  /**
   * Batch processors only: awaited between the transactions of one call when it takes several (a
   * failing batch split in halves, redeliveries that failed or died before run one at a time), so a
   * broker client that must show it is alive within a session (a Kafka group heartbeat) can. If it
   * rejects, no further transaction starts: the messages not decided yet come back `retry`
   * (`internal-error`, not counted), and what already committed stays committed.
   */
  heartbeat?: () => Promise<void>;
}

/**
 * Outcomes an adapter decides itself, without calling the processor (no message id, a body that
 * does not parse): adapters report them here so that a processor's observers (the outcome recorder,
 * metrics) see every delivery, not only those that reached the processor.
 */
export type OutcomeObserver = (outcome: InboxOutcome) => void;

/**
 * Records a dead-letter decision with where the copy goes (`destination`) and where the delivery
 * came from (`source`); see {@link InboxProcessor.recordDeadLetter}.
 */
export type DeadLetterRecorder = (outcome: InboxOutcome, place: { destination: string; source?: string | undefined }) => Promise<void>;

/** A per-message processor built by {@link withInbox}, ready to hand to a broker adapter. */
export interface InboxProcessor {
  (message: InboxMessage, options?: ProcessOptions): Promise<InboxOutcome>;
  /** Distinguishes a per-message processor from a batch one for adapters. */
  readonly kind: 'single';
  /** The consumer (dedup scope) this processor writes under. */
  readonly consumer: string;
  /**
   * Checks that the inbox tables exist with their columns and unique key. Rejects with
   * `INBOX_TABLE_MISSING`, or `DATABASE_UNAVAILABLE` when the database cannot be reached. Broker
   * consumers call it in `start()`, so a missing migration fails loudly instead of retrying forever.
   * A wrapper around a processor must forward it.
   */
  checkTables(): Promise<void>;
  /** Adapters call it with every outcome they decide without the processor; see {@link OutcomeObserver}. A no-op unless a wrapper observes. */
  observe: OutcomeObserver;
  /**
   * Records a `dead-letter` or `conflict` outcome in the inbox's dead-letters table (and moves the
   * message's attempts record there, so a replay from the dead-letter target starts with a fresh
   * retry budget). Broker consumers call it before publishing the dead-letter copy; when it rejects,
   * they do not dead-letter and the delivery comes back. Processors from `withInbox` and
   * `withInboxBatch` have it; a wrapper must forward it (`wrapProcessor` does).
   */
  recordDeadLetter?: DeadLetterRecorder;
  /**
   * The `maxAttempts` this processor dead-letters at: broker consumers compare it with the broker's
   * own redelivery limit (an SQS redrive policy's `maxReceiveCount`) at `start()`. Processors from
   * `withInbox` and `withInboxBatch` have it; `wrapProcessor` forwards it.
   */
  readonly maxAttempts?: number;
}

/** A batch processor built by {@link withInboxBatch}: outcomes come back in input order. */
export interface InboxBatchProcessor {
  (messages: readonly InboxMessage[], options?: ProcessOptions): Promise<InboxOutcome[]>;
  readonly kind: 'batch';
  readonly consumer: string;
  /** See {@link InboxProcessor.checkTables}. */
  checkTables(): Promise<void>;
  /** See {@link InboxProcessor.observe}. */
  observe: OutcomeObserver;
  /** See {@link InboxProcessor.recordDeadLetter}. */
  recordDeadLetter?: DeadLetterRecorder;
  /** See {@link InboxProcessor.maxAttempts}. */
  readonly maxAttempts?: number;
}

/** Either kind of processor; adapters accept both. */
export type AnyInboxProcessor = InboxProcessor | InboxBatchProcessor;

/** True when `processor` came from {@link withInboxBatch}. */
export function isBatchProcessor(processor: AnyInboxProcessor): processor is InboxBatchProcessor {
  return processor.kind === 'batch';
}
