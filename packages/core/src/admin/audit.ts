import { sql } from 'drizzle-orm';
import { InboxError, InboxErrorCodes } from '../errors.js';
import { type AdminTables, type Executable, rowsOf } from './admin-sql.js';
import { type AuditRecord, auditRecord, type JsonRow } from './records.js';

/** Who made a repair and why: every repair requires both, and both are written to the audit table. */
export interface RepairOptions {
  /** Why, in the operator's words (required, non-empty). */
  reason: string;
  /** Who: a user or service name (the CLI's `--actor`, default the OS user). Required, non-empty. */
  actor: string;
}

/** @internal One audit entry to write. */
export interface AuditEntry {
  actor: string;
  action: 'release' | 'requeue' | 'purge';
  consumer: string | null;
  messageId: string | null;
  reason: string | null;
  before: unknown;
  after: unknown;
}

/** @internal Refuses a repair without an actor or a reason before touching the database. */
export function assertRepairOptions(options: RepairOptions): void {
  for (const key of ['actor', 'reason'] as const) {
    const value = options?.[key];
    if (typeof value !== 'string' || value.trim() === '') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, `a repair needs a non-empty ${key}`);
  }
}

/**
 * @internal Appends one row to the audit table. Call it with the transaction that makes the change,
 * so a repair and its audit row commit (or roll back) together.
 */
export async function writeAudit(db: Executable, tables: AdminTables, entry: AuditEntry): Promise<AuditRecord> {
  const json = (value: unknown) => (value === undefined || value === null ? sql`null` : sql`${JSON.stringify(value)}::jsonb`);
  const [row] = await rowsOf<{ row: JsonRow }>(
    db,
    sql`insert into ${tables.audit} as a (actor, action, consumer, message_id, reason, before, after)
      values (${entry.actor}, ${entry.action}, ${entry.consumer}, ${entry.messageId}, ${entry.reason}, ${json(entry.before)}, ${json(entry.after)})
      returning to_jsonb(a) as row`,
  );
  return auditRecord(row!.row);
}
