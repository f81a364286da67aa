import { sql } from 'drizzle-orm';
import { InboxError, InboxErrorCodes } from '../errors.js';
import { cutoffOf, purgeInbox, retentionWindow, WITHOUT_LIVE_LEASE } from '../retention.js';
import type { InboxTableNames } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';
import { adminOperation, adminTables, rowsOf, adminKey } from './admin-sql.js';
import { writeAudit } from './audit.js';
import type { AuditRecord } from './records.js';

/** Options of {@link previewPurge} and {@link auditedPurge}. */
export interface AdminPurgeOptions {
  /** Completed rows older than this many ms (server time). */
  olderThanMs: number;
  /** Only this consumer's rows. Default: every consumer. */
  consumer?: string;
}

/** What a purge would delete now. */
export interface PurgePreview {
  /** Inbox rows (completed, or claims without a live lease) older than the window. */
  inbox: number;
  /** Attempts records whose last attempt is older than the window. */
  attempts: number;
}

/**
 * Counts what {@link purgeInbox} would delete with the same window and consumer, using its predicate
 * (a live leased claim is never counted). Deletes nothing.
 */
export async function previewPurge(db: AnyPgDatabase, names: InboxTableNames, options: AdminPurgeOptions): Promise<PurgePreview> {
  const cutoff = cutoffOf(retentionWindow(options.olderThanMs));
  const tables = adminTables(names);
  const scope = options.consumer === undefined ? sql`true` : sql`consumer = ${adminKey(options.consumer, 'consumer')}`;
  return adminOperation('purge --dry-run', db, tables.resolved, async () => {
    const [row] = await rowsOf<{ inbox: number; attempts: number }>(
      db,
      sql`select (select count(*)::int from ${tables.inbox}
                  where completed_at < ${cutoff} and ${scope} and ${WITHOUT_LIVE_LEASE}) as inbox,
                 (select count(*)::int from ${tables.attempts} where last_attempt_at < ${cutoff} and ${scope}) as attempts`,
    );
    return { inbox: Number(row?.inbox ?? 0), attempts: Number(row?.attempts ?? 0) };
  });
}

/** What {@link auditedPurge} did. */
export interface AuditedPurgeResult {
  /** Inbox rows deleted. */
  deleted: number;
  /** Attempts records deleted (the retry budgets of messages last tried before the window). */
  attemptsDeleted: number;
  audit: AuditRecord;
}

/**
 * Runs {@link purgeInbox} and then appends an audit row (`action: 'purge'`, `after: { deleted,
 * attemptsDeleted, olderThanMs, batchSize }`). The purge commits batch by batch (so it never holds long locks) and
 * the audit row after it: unlike the message repairs, they are not one transaction; a purge that
 * fails halfway leaves no audit row for the batches it deleted (they were past retention anyway).
 */
export async function auditedPurge(
  db: AnyPgDatabase,
  names: InboxTableNames,
  options: AdminPurgeOptions & { batchSize?: number; actor: string; reason?: string },
): Promise<AuditedPurgeResult> {
  retentionWindow(options.olderThanMs);
  if (typeof options.actor !== 'string' || options.actor.trim() === '')
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'a purge needs a non-empty actor');
  const tables = adminTables(names);
  const batchSize = options.batchSize ?? 1000;
  return adminOperation('purge', db, tables.resolved, async () => {
    const purgeOptions = {
      olderThanMs: options.olderThanMs,
      batchSize,
      tables: names,
      ...(options.consumer === undefined ? {} : { consumer: options.consumer }),
    };
    const { deleted, attemptsDeleted } = await purgeInbox(db, purgeOptions);
    const audit = await writeAudit(db, tables, {
      actor: options.actor,
      action: 'purge',
      consumer: options.consumer ?? null,
      messageId: null,
      reason: options.reason ?? null,
      before: null,
      after: { deleted, attemptsDeleted, olderThanMs: options.olderThanMs, batchSize },
    });
    return { deleted, attemptsDeleted, audit };
  });
}
