import { sql } from 'drizzle-orm';
import { storableText } from './error-text.js';
import { qualifiedName } from './qualified-name.js';
import type { InboxTables } from './schema.js';
import type { AnyPgDatabase, InboxOutcome } from './types.js';

/** Where a dead-lettered delivery went and came from, as the adapter knows it. */
export interface DeadLetterPlace {
  /** The dead-letter target (`amqp:orders.dead-letter`, `kafka:payments.dlq`, an SQS queue URL). */
  destination: string;
  /** Where the delivery came from (`amqp:orders`, `kafka:payments/3`). */
  source?: string | undefined;
}

/**
 * @internal Behind `processor.recordDeadLetter()`: writes the dead-letter decision to the
 * dead-letters table and, in the same statement, moves the message's attempts record there (its
 * count, first and last attempt). The retry budget was spent and is now on record; a copy replayed
 * from the dead-letter target later starts with a fresh budget instead of being dead-lettered again
 * at its first failure.
 *
 * Adapters call it before they publish the dead-letter copy: if it fails, the delivery is not
 * dead-lettered (it comes back, like a failed publish), so no dead-letter goes unrecorded. If the
 * publish fails after it, the record stays and the next dead-letter of that delivery adds another.
 */
export async function recordDeadLetter(db: AnyPgDatabase, tables: InboxTables, outcome: InboxOutcome, place: DeadLetterPlace): Promise<void> {
  const deadLetters = sql.raw(qualifiedName(tables.inboxDeadLetters));
  const attempts = sql.raw(qualifiedName(tables.inboxAttempts));
  const consumer = storableText(outcome.consumer, 1000);
  const messageId = storableText(outcome.messageId, 1000);
  const reason = storableText(String(outcome.reason ?? outcome.status), 1000);
  const code = outcome.error === undefined ? null : storableText(String(outcome.error.code), 100);
  const error = outcome.error === undefined ? null : storableText(outcome.error.message, 4000);
  const iso = (date: Date | undefined) => (date === undefined || Number.isNaN(date.getTime()) ? null : date.toISOString());
  await db.execute(sql`
    with moved as (
      delete from ${attempts} where consumer = ${consumer} and message_id = ${messageId}
      returning attempts, first_attempt_at, last_attempt_at
    )
    insert into ${deadLetters} (consumer, message_id, reason, error_code, error, attempts, first_attempt_at, last_attempt_at, destination, source)
    select ${consumer}, ${messageId}, ${reason}, ${code}, ${error},
           greatest(coalesce((select attempts from moved), 0), ${outcome.attempt ?? 1}::int),
           coalesce((select first_attempt_at from moved), ${iso(outcome.firstAttemptAt)}::timestamptz),
           coalesce((select last_attempt_at from moved), ${iso(outcome.lastAttemptAt)}::timestamptz),
           ${storableText(place.destination, 2000)}, ${place.source === undefined ? null : storableText(place.source, 1024)}`);
}
