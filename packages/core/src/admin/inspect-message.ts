import { sql } from 'drizzle-orm';
import { InboxErrorCodes } from '../errors.js';
import type { InboxTableNames } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';
import { adminOperation, adminTables, rowsOf, adminKey } from './admin-sql.js';
import { readMessageRows, notFound } from './message-rows.js';
import {
  type AttemptsRecord,
  type AuditRecord,
  attemptsRecord,
  auditRecord,
  type DeadLetterRecord,
  deadLetterRecord,
  type InboxRecord,
  inboxRecord,
  type JsonRow,
} from './records.js';

/** Everything recorded about one message, as {@link inspectMessage} finds it. */
export interface MessageInspection {
  consumer: string;
  messageId: string;
  /** Its inbox row (completed, or an open leased claim); null when it was never completed nor claimed (or was purged). */
  inbox: InboxRecord | null;
  /** Its failure count; null when it has no failure on record. */
  attempts: AttemptsRecord | null;
  /** Its dead-letters, oldest first. */
  deadLetters: DeadLetterRecord[];
  /** Repairs made to it, oldest first. */
  audit: AuditRecord[];
  /** Leased claims: ms left on the lease by the server's clock (0 once expired); null without a lease. */
  leaseRemainingMs: number | null;
}

/**
 * Everything inboxed recorded about one message: its inbox row, attempts row, dead-letter records and
 * audit rows. Throws `MESSAGE_NOT_FOUND` when there is none of these, `UNKNOWN_CONSUMER` when the
 * consumer itself has no row anywhere (a typo, most likely).
 */
export async function inspectMessage(db: AnyPgDatabase, names: InboxTableNames, consumer: string, messageId: string): Promise<MessageInspection> {
  const tables = adminTables(names);
  adminKey(consumer, 'consumer');
  adminKey(messageId, 'messageId');
  return adminOperation('inspect', db, tables.resolved, async () => {
    const rows = await readMessageRows(db, tables, consumer, messageId, false);
    const deadLetters = await rowsOf<{ row: JsonRow }>(
      db,
      sql`select to_jsonb(d) as row from ${tables.deadLetters} d where consumer = ${consumer} and message_id = ${messageId} order by id`,
    );
    const audit = await rowsOf<{ row: JsonRow }>(
      db,
      sql`select to_jsonb(a) as row from ${tables.audit} a where consumer = ${consumer} and message_id = ${messageId} order by id`,
    );
    if (rows.inbox === null && rows.attempts === null && deadLetters.length === 0 && audit.length === 0) {
      throw await notFound(
        db,
        tables,
        consumer,
        messageId,
        InboxErrorCodes.MESSAGE_NOT_FOUND,
        `nothing is recorded for message ${JSON.stringify(messageId)} of ${JSON.stringify(consumer)}`,
      );
    }
    let leaseRemainingMs: number | null = null;
    if (rows.inbox !== null && rows.inbox.lease_expires_at !== null) {
      const [lease] = await rowsOf<{ ms: number | null }>(
        db,
        sql`select greatest(0, extract(epoch from (lease_expires_at - now())) * 1000)::float8 as ms
            from ${tables.inbox} where consumer = ${consumer} and message_id = ${messageId}`,
      );
      leaseRemainingMs = lease?.ms === null || lease?.ms === undefined ? null : Math.round(Number(lease.ms));
    }
    return {
      consumer,
      messageId,
      inbox: rows.inbox === null ? null : inboxRecord(rows.inbox),
      attempts: rows.attempts === null ? null : attemptsRecord(rows.attempts),
      deadLetters: deadLetters.map((r) => deadLetterRecord(r.row)),
      audit: audit.map((r) => auditRecord(r.row)),
      leaseRemainingMs,
    };
  });
}
