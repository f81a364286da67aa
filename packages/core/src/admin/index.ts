/**
 * `@inboxed/core/admin`: inspection and audited repairs of an inbox, for operators. The `inboxed`
 * CLI (`@inboxed/cli`) is a thin shell over these functions; apps can call them too (an admin page,
 * a runbook script).
 *
 * Every function takes a Drizzle database (node-postgres, postgres-js or PGlite) and the inbox's
 * table names (`{ schema, table }`, as given to `migrate()`), and raises only {@link InboxError}s:
 * `INBOX_TABLE_MISSING` when the tables are missing or not migrated to the latest version,
 * `DATABASE_UNAVAILABLE`, `INBOX_QUERY_FAILED`, and the refusals below.
 *
 * Safety rules of the repairs ({@link releaseMessage}, {@link requeueMessage}, {@link auditedPurge}):
 * - they never mark a message succeeded, and never change a completed (`processed`/`rejected`) row
 *   (`ALREADY_COMPLETED`);
 * - each needs an actor and a reason, and writes one row to the audit table (`<table>_audit`) with
 *   the affected rows before and after, in the same transaction as the change.
 *
 * ```ts
 * import { inboxStatus, releaseMessage } from '@inboxed/core/admin';
 *
 * const status = await inboxStatus(db, { schema: 'messaging' }, { consumer: 'billing' });
 * await releaseMessage(db, { schema: 'messaging' }, 'billing', 'order-42', { actor: 'alice', reason: 'worker host lost' });
 * ```
 *
 * @module
 */
export type { InboxError } from '../errors.js';
export type { RepairOptions } from './audit.js';
export { inspectMessage, type MessageInspection } from './inspect-message.js';
export { listDeadLetters, type ListDeadLettersOptions } from './list-dead-letters.js';
export { pendingMigrations, type PendingMigration } from './pending-migrations.js';
export { auditedPurge, previewPurge, type AdminPurgeOptions, type AuditedPurgeResult, type PurgePreview } from './purge.js';
export type { AttemptsRecord, AuditRecord, DeadLetterRecord, InboxRecord } from './records.js';
export { releaseMessage, requeueMessage, type RepairResult, type RepairSide } from './repairs.js';
export { inboxStatus, type ConsumerStatus, type FailingMessage, type InboxStatusOptions } from './status.js';
