import { sql } from 'drizzle-orm';
import { InboxErrorCodes } from '../errors.js';
import type { InboxTableNames } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';
import { type AdminTables, adminOperation, adminTables, type Executable, rowsOf, adminKey } from './admin-sql.js';
import { assertRepairOptions, type RepairOptions, writeAudit } from './audit.js';
import { assertNotCompleted, type MessageRows, notFound, readMessageRows } from './message-rows.js';
import { type AttemptsRecord, type AuditRecord, attemptsRecord, type InboxRecord, inboxRecord } from './records.js';

/** A message's rows on one side of a repair. */
export interface RepairSide {
  inbox: InboxRecord | null;
  attempts: AttemptsRecord | null;
}

/** What a repair changed, with the audit row written in the same transaction. */
export interface RepairResult {
  action: 'release' | 'requeue';
  consumer: string;
  messageId: string;
  /** What was done, in words: `lease expired now`, `attempts record removed (3 attempts)`. */
  changes: string[];
  before: RepairSide;
  after: RepairSide;
  audit: AuditRecord;
}

function side(rows: MessageRows): RepairSide {
  return { inbox: rows.inbox === null ? null : inboxRecord(rows.inbox), attempts: rows.attempts === null ? null : attemptsRecord(rows.attempts) };
}

async function deleteAttempts(tx: Executable, tables: AdminTables, consumer: string, messageId: string): Promise<number | null> {
  const [row] = await rowsOf<{ attempts: number }>(
    tx,
    sql`delete from ${tables.attempts} where consumer = ${consumer} and message_id = ${messageId} returning attempts`,
  );
  return row === undefined ? null : Number(row.attempts);
}

/** What a repair does inside its transaction: the changes it made, in words; it throws when there is nothing to do. */
type RepairStep = (tx: Executable, tables: AdminTables, before: MessageRows) => Promise<string[]>;

/**
 * The frame every repair shares: one transaction that reads the message's rows under lock, refuses
 * a completed message, makes the change, and writes one audit row with the rows before and after.
 */
function auditedRepair(
  action: RepairResult['action'],
  db: AnyPgDatabase,
  names: InboxTableNames,
  consumer: string,
  messageId: string,
  options: RepairOptions,
  step: RepairStep,
): Promise<RepairResult> {
  assertRepairOptions(options);
  adminKey(consumer, 'consumer');
  adminKey(messageId, 'messageId');
  const tables = adminTables(names);
  return adminOperation(action, db, tables.resolved, () =>
    db.transaction(async (tx) => {
      const before = await readMessageRows(tx, tables, consumer, messageId, true);
      assertNotCompleted(before, consumer, messageId, action);
      const changes = await step(tx, tables, before);
      const after = await readMessageRows(tx, tables, consumer, messageId, false);
      const audit = await writeAudit(tx, tables, { actor: options.actor, action, consumer, messageId, reason: options.reason, before, after });
      return { action, consumer, messageId, changes, before: side(before), after: side(after), audit };
    }),
  );
}

/** `attempts record removed (3 failed attempts)` */
function attemptsRemoved(attempts: number): string {
  return `attempts record removed (${attempts} failed attempt${attempts === 1 ? '' : 's'})`;
}

/**
 * Frees a stuck message so its next delivery can run it again. Two things, whichever apply:
 *
 * - an open leased claim (`processing`) whose lease is live or ran out is revoked: its fencing token
 *   goes up by one and its lease is given back. The holder can no longer renew, release or complete it
 *   (every one of those writes is fenced by the token), and the next delivery claims it at once, with
 *   a higher token still, as after a failed attempt: not as the takeover of a worker that died,
 *   which would count an attempt against the fresh budget below;
 * - its attempts record is deleted, so it gets a fresh retry budget.
 *
 * It never marks anything succeeded, and never touches a completed message: `processed` or
 * `rejected` is refused with `ALREADY_COMPLETED`. With nothing to do (no live claim, no attempts
 * record) it throws `NOTHING_TO_RELEASE`; when the consumer has no row anywhere, `UNKNOWN_CONSUMER`.
 * The change and one audit row (`action: 'release'`, the rows before and after) commit in one
 * transaction, under the rows' locks.
 *
 * A holder that is still alive keeps running until its next fenced write, which is refused: its
 * `renewLease()` rejects with `LEASE_LOST` (its signal fires) and its completion commits nothing.
 * The token moves rather than only the lease because a live holder renews by its token: with the
 * token unchanged, one renewal before the next delivery arrived would have undone the release.
 * An external call the revoked holder already made is repeated by the next holder under the same
 * idempotency key, which is what that key is for.
 */
export async function releaseMessage(
  db: AnyPgDatabase,
  names: InboxTableNames,
  consumer: string,
  messageId: string,
  options: RepairOptions,
): Promise<RepairResult> {
  return auditedRepair('release', db, names, consumer, messageId, options, async (tx, tables, before) => {
    const changes: string[] = [];
    const expired = await rowsOf<unknown>(
      tx,
      sql`update ${tables.inbox} set lease_expires_at = null, fencing_token = fencing_token + 1
        where consumer = ${consumer} and message_id = ${messageId} and status = 'processing' and lease_expires_at is not null
        returning 1`,
    );
    if (expired.length > 0) changes.push('leased claim revoked: fencing token + 1, lease given back, the next delivery takes it over');
    const attempts = await deleteAttempts(tx, tables, consumer, messageId);
    if (attempts !== null) changes.push(attemptsRemoved(attempts));
    if (changes.length > 0) return changes;
    const state = before.inbox === null ? 'it has no inbox row' : 'its claim was given back already';
    throw await notFound(
      tx,
      tables,
      consumer,
      messageId,
      InboxErrorCodes.NOTHING_TO_RELEASE,
      `nothing to release for ${JSON.stringify(messageId)} of ${JSON.stringify(consumer)}: ${state} and no attempts record; its next delivery runs it`,
    );
  });
}

/**
 * Gives a message a fresh retry budget by deleting its attempts record; audited like
 * {@link releaseMessage}, refused for completed messages (`ALREADY_COMPLETED`) and when there is no
 * attempts record (`NOTHING_TO_REQUEUE`: the budget is already fresh).
 *
 * Requeue does not send anything: replaying a dead-lettered message is done with the broker's own
 * tools (a RabbitMQ shovel or `rabbitmqadmin`, `kcat` from the dead-letter topic, SQS DLQ redrive).
 * The adapters already reset the budget when they record a dead-letter (the attempts row moves into
 * the dead-letter table), so a replayed message starts from zero by itself; requeue is for budgets
 * left behind: custom consume loops, dead-letters recorded by older versions, a replay that should
 * run before the old record is purged.
 */
export async function requeueMessage(
  db: AnyPgDatabase,
  names: InboxTableNames,
  consumer: string,
  messageId: string,
  options: RepairOptions,
): Promise<RepairResult> {
  return auditedRepair('requeue', db, names, consumer, messageId, options, async (tx, tables) => {
    const attempts = await deleteAttempts(tx, tables, consumer, messageId);
    if (attempts !== null) return [`${attemptsRemoved(attempts)}: fresh retry budget`];
    throw await notFound(
      tx,
      tables,
      consumer,
      messageId,
      InboxErrorCodes.NOTHING_TO_REQUEUE,
      `nothing to requeue for ${JSON.stringify(messageId)} of ${JSON.stringify(consumer)}: it has no attempts record, so its retry budget is already fresh; replay it with the broker's tools`,
    );
  });
}
