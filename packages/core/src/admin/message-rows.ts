import { sql } from 'drizzle-orm';
import { InboxError, type InboxErrorCode, InboxErrorCodes } from '../errors.js';
import { type AdminTables, type Executable, rowsOf } from './admin-sql.js';
import type { JsonRow } from './records.js';

/** @internal A message's mutable rows, as stored (snake_case JSON): what an audit row's before/after holds. */
export interface MessageRows {
  inbox: JsonRow | null;
  attempts: JsonRow | null;
}

/**
 * @internal Reads the inbox and attempts rows of a message; `lock` takes their row locks (inside a
 * transaction), so a repair and a worker never interleave on them.
 */
export async function readMessageRows(db: Executable, tables: AdminTables, consumer: string, messageId: string, lock: boolean): Promise<MessageRows> {
  const forUpdate = lock ? sql` for update` : sql``;
  const [inbox] = await rowsOf<{ row: JsonRow }>(
    db,
    sql`select to_jsonb(i) as row from ${tables.inbox} i where consumer = ${consumer} and message_id = ${messageId}${forUpdate}`,
  );
  const [attempts] = await rowsOf<{ row: JsonRow }>(
    db,
    sql`select to_jsonb(a) as row from ${tables.attempts} a where consumer = ${consumer} and message_id = ${messageId}${forUpdate}`,
  );
  return { inbox: inbox?.row ?? null, attempts: attempts?.row ?? null };
}

/** @internal True when the consumer has a row in the inbox, attempts or dead-letter table. */
export async function consumerExists(db: Executable, tables: AdminTables, consumer: string): Promise<boolean> {
  const [row] = await rowsOf<{ found: boolean }>(
    db,
    sql`select exists (select 1 from ${tables.inbox} where consumer = ${consumer})
        or exists (select 1 from ${tables.attempts} where consumer = ${consumer})
        or exists (select 1 from ${tables.deadLetters} where consumer = ${consumer}) as found`,
  );
  return row?.found === true;
}

/**
 * @internal The error for a message with nothing to act on: `UNKNOWN_CONSUMER` when the consumer has
 * no row at all (the likelier mistake: a misspelt consumer), otherwise `code` with `message`.
 */
export async function notFound(
  db: Executable,
  tables: AdminTables,
  consumer: string,
  messageId: string,
  code: InboxErrorCode,
  message: string,
): Promise<InboxError> {
  const known = await consumerExists(db, tables, consumer);
  return known
    ? new InboxError(code, message, { messageIds: [messageId], details: { consumer } })
    : new InboxError(InboxErrorCodes.UNKNOWN_CONSUMER, `no consumer named ${JSON.stringify(consumer)} has any inbox, attempts or dead-letter row`, {
        messageIds: [messageId],
        details: { consumer },
      });
}

/** @internal Refuses a repair of a completed message: repairs never touch processed or rejected rows. */
export function assertNotCompleted(rows: MessageRows, consumer: string, messageId: string, action: string): void {
  const status = rows.inbox?.status;
  if (status === 'processed' || status === 'rejected') {
    throw new InboxError(
      InboxErrorCodes.ALREADY_COMPLETED,
      `refusing to ${action} ${JSON.stringify(messageId)} of ${JSON.stringify(consumer)}: it is already ${status}; repairs never touch completed messages`,
      { messageIds: [messageId], details: { consumer, status } },
    );
  }
}
