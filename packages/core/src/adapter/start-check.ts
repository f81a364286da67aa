import { describeError } from '../error-text.js';
import { InboxError, InboxErrorCodes, isInboxError } from '../errors.js';
import type { AnyInboxProcessor } from '../types.js';
import type { ConsumerEventEmitter } from './events.js';

/**
 * Run by every broker consumer in `start()`, before it connects: tables that are missing, lack a
 * column or lack their unique key reject the start with `INBOX_TABLE_MISSING`, a PostgreSQL older
 * than 14 with `UNSUPPORTED_DATABASE` (a misconfiguration
 * must not look like a healthy consumer that retries every message forever). A database that cannot
 * be reached right now does not: it is reported as an `error` event and consuming starts anyway, so
 * the consumer recovers on its own when the database comes back (its messages are retried meanwhile).
 */
export async function checkTablesAtStart(processor: AnyInboxProcessor, events: ConsumerEventEmitter): Promise<void> {
  try {
    await processor.checkTables();
  } catch (error) {
    if (isInboxError(error) && (error.code === InboxErrorCodes.INBOX_TABLE_MISSING || error.code === InboxErrorCodes.UNSUPPORTED_DATABASE)) throw error;
    events.emit(
      'error',
      isInboxError(error)
        ? error
        : new InboxError(InboxErrorCodes.INBOX_QUERY_FAILED, `checking the inbox tables failed: ${describeError(error)}`, { cause: error }),
    );
  }
}
