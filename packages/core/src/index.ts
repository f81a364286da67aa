/**
 * @inboxed/core: exactly-once database effects for message consumers. For one consumer and one
 * message id, the handler's effect in your PostgreSQL database commits at most once, and every
 * delivery ends as an outcome your broker adapter acts on (ack, retry later, or dead-letter).
 *
 * Effects outside the database (a payment provider, an email API) use leased mode:
 * `withInbox(handler, { mode: 'leased' })`.
 *
 * Broker adapters are built on `@inboxed/core/adapter`; the Drizzle tables alone are
 * `@inboxed/core/schema`; test helpers are `@inboxed/core/testing`.
 *
 * @packageDocumentation
 */
export { withInbox, type InboxHandler, type HandlerResult } from './with-inbox.js';
export { withInboxBatch, type InboxBatchHandler, type BatchHandlerContext, type BatchRejections } from './with-inbox-batch.js';
export type { InboxOptions, LeasedInboxOptions } from './options.js';
export type { LeasedInboxHandler, LeasedHandlerContext } from './leased/with-leased-inbox.js';
export { storeResult, isStoredResult, MAX_RESULT_BYTES, type StoredResult } from './stored-result.js';
export { wrapProcessor, type ProcessorMiddleware, type BatchProcessorMiddleware } from './wrap-processor.js';
export type { StandardSchemaV1 } from './standard-schema.js';
export type { ValidationIssue } from './prepare.js';
export {
  reject,
  isRejection,
  isBatchProcessor,
  OutcomeReasons,
  type AnyPgDatabase,
  type TransactionOf,
  type InboxMessage,
  type InboxOutcome,
  type OutcomeFields,
  type ProcessedOutcome,
  type DuplicateOutcome,
  type RejectedOutcome,
  type RetryOutcome,
  type BusyOutcome,
  type DeadLetterOutcome,
  type ConflictOutcome,
  type InboxStatus,
  type OutcomeReason,
  type Rejection,
  type HandlerContext,
  type ProcessOptions,
  type OutcomeObserver,
  type DeadLetterRecorder,
  type InboxProcessor,
  type InboxBatchProcessor,
  type AnyInboxProcessor,
} from './types.js';
export {
  InboxError,
  InboxErrorCodes,
  PermanentError,
  isInboxError,
  isPermanentError,
  describeError,
  type InboxErrorCode,
  type InboxErrorDetails,
  type InboxErrorOptions,
} from './errors.js';
export { fingerprintMessage, type FingerprintOption } from './fingerprint.js';
export { MAX_MESSAGE_ID_BYTES } from './message-id.js';
export type { BackoffOptions } from './backoff.js';
export {
  createInboxTables,
  inboxTable,
  inboxAttemptsTable,
  inboxDeadLettersTable,
  inboxAuditTable,
  type CreatedInboxTables,
  type InboxTableNames,
  type InboxTables,
} from './schema.js';
export { migrate, type MigrateOptions, type MigrateResult } from './migrations/migrate.js';
export { purgeInbox, type PurgeOptions, type PurgeResult } from './retention.js';
export { startInboxRetention, type InboxRetention, type InboxRetentionOptions, type RetentionRun } from './retention-scheduler.js';
export { inspectLeases, type LeaseReport } from './leased/lease-report.js';
export { configureTelemetry, type InboxTelemetryOptions, type MeterProviderLike, type TracerProviderLike } from './telemetry/config.js';
