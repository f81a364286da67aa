import { toDate } from './admin-sql.js';

/** An inbox row as the admin API reports it. */
export interface InboxRecord {
  consumer: string;
  messageId: string;
  /** `processed`, `rejected`, or `processing` (an open leased-mode claim). */
  status: string;
  reason: string | null;
  fingerprint: string | null;
  source: string | null;
  receivedAt: Date | null;
  completedAt: Date | null;
  /** Leased mode: when the open claim's lease ends; null once completed or given back. */
  leaseExpiresAt: Date | null;
  fencingToken: number;
  /** The stored result as JSON text, if the handler stored one. */
  result: string | null;
}

/** A message's durable failure count (its attempts row). */
export interface AttemptsRecord {
  consumer: string;
  messageId: string;
  attempts: number;
  firstAttemptAt: Date | null;
  lastAttemptAt: Date | null;
  lastError: string | null;
  lastErrorCode: string | null;
}

/** One recorded dead-letter. */
export interface DeadLetterRecord {
  id: number;
  consumer: string;
  messageId: string;
  reason: string;
  errorCode: string | null;
  error: string | null;
  attempts: number;
  firstAttemptAt: Date | null;
  lastAttemptAt: Date | null;
  destination: string | null;
  source: string | null;
  deadLetteredAt: Date | null;
}

/** One repair, as written to the audit table. */
export interface AuditRecord {
  id: number;
  at: Date | null;
  actor: string;
  /** `release`, `requeue`, `purge`. */
  action: string;
  consumer: string | null;
  messageId: string | null;
  reason: string | null;
  /** The affected rows before the repair (snake_case columns, as stored). */
  before: unknown;
  /** The affected rows after it. */
  after: unknown;
}

/** A row as PostgreSQL's `to_jsonb` gives it: snake_case columns, timestamps as ISO text. */
export type JsonRow = Record<string, unknown>;

const text = (value: unknown): string | null => (value === null || value === undefined ? null : String(value));

/** @internal */
export function inboxRecord(row: JsonRow): InboxRecord {
  return {
    consumer: String(row.consumer),
    messageId: String(row.message_id),
    status: String(row.status),
    reason: text(row.reason),
    fingerprint: text(row.fingerprint),
    source: text(row.source),
    receivedAt: toDate(row.received_at),
    completedAt: toDate(row.completed_at),
    leaseExpiresAt: toDate(row.lease_expires_at),
    fencingToken: Number(row.fencing_token),
    result: text(row.result),
  };
}

/** @internal */
export function attemptsRecord(row: JsonRow): AttemptsRecord {
  return {
    consumer: String(row.consumer),
    messageId: String(row.message_id),
    attempts: Number(row.attempts),
    firstAttemptAt: toDate(row.first_attempt_at),
    lastAttemptAt: toDate(row.last_attempt_at),
    lastError: text(row.last_error),
    lastErrorCode: text(row.last_error_code),
  };
}

/** @internal */
export function deadLetterRecord(row: JsonRow): DeadLetterRecord {
  return {
    id: Number(row.id),
    consumer: String(row.consumer),
    messageId: String(row.message_id),
    reason: String(row.reason),
    errorCode: text(row.error_code),
    error: text(row.error),
    attempts: Number(row.attempts),
    firstAttemptAt: toDate(row.first_attempt_at),
    lastAttemptAt: toDate(row.last_attempt_at),
    destination: text(row.destination),
    source: text(row.source),
    deadLetteredAt: toDate(row.dead_lettered_at),
  };
}

/** @internal */
export function auditRecord(row: JsonRow): AuditRecord {
  return {
    id: Number(row.id),
    at: toDate(row.at),
    actor: String(row.actor),
    action: String(row.action),
    consumer: text(row.consumer),
    messageId: text(row.message_id),
    reason: text(row.reason),
    before: row.before ?? null,
    after: row.after ?? null,
  };
}
