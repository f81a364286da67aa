import { classifyDatabaseError } from './database-errors.js';
import { InboxError, InboxErrorCodes } from './errors.js';
import { infrastructureRetry } from './failure.js';
import type { InboxStore } from './inbox-store.js';
import type { ResolvedOptions } from './options.js';
import { type AnyPgDatabase, type InboxMessage, type InboxOutcome, OutcomeReasons } from './types.js';

/*
 * Attempts that never finish. A failed attempt is counted after its transaction rolled back; a
 * message whose processing kills the process (out of memory, a native crash, `process.exit`, a
 * kill) never gets that far, so it came back uncounted after every restart, for ever. A delivery
 * the broker marks `redelivered` may be such a message's next copy: its attempt is counted before
 * the handler runs, in a statement of its own, and taken back when the attempt ends without
 * failing. Attempts that died stay counted, and once they exceed `maxAttempts` the message is
 * dead-lettered without running again.
 */

/**
 * @internal Runs a processor's redelivered attempts one at a time. When a process dies, every
 * delivery it had in flight comes back redelivered, not only the one that killed it; counted ahead
 * all at once, the innocent ones would be charged for each death too (in a test, 15 of 20 good
 * messages were dead-lettered after three). One at a time, only the attempt that was running when
 * the process died stays counted. Deliveries that are not redeliveries do not wait for the lane.
 * A redelivered handler that never returns (no `handlerTimeoutMs`) holds the lane, and with it the
 * processor's other redeliveries.
 */
export class AttemptLane {
  private last: Promise<unknown> = Promise.resolve();

  run<T>(attempt: () => Promise<T>): Promise<T> {
    const next = this.last.then(attempt, attempt);
    this.last = next.then(
      () => undefined,
      () => undefined,
    );
    return next;
  }
}

/** @internal What {@link beginAttempt} decided: run it (counted ahead or not), or this outcome instead. */
export type AttemptStart = { counted: boolean } | { outcome: InboxOutcome };

/**
 * @internal Counts a redelivered message's attempt ahead (see above). Not redelivered, or already in
 * the inbox (a duplicate): nothing to count. Attempts past `maxAttempts`: the dead-letter outcome.
 * A database that cannot count it: the outage retry (not counted, like any outage).
 */
export async function beginAttempt(options: ResolvedOptions<AnyPgDatabase, unknown>, store: InboxStore, message: InboxMessage): Promise<AttemptStart> {
  if (message.redelivered !== true) return { counted: false };
  let attempts: number | null;
  try {
    attempts = await store.startAttempt(options.db, message.id);
  } catch (error) {
    const missing = classifyDatabaseError(error) === 'schema-missing';
    return {
      outcome: infrastructureRetry(
        options,
        message,
        missing ? InboxErrorCodes.INBOX_TABLE_MISSING : InboxErrorCodes.DATABASE_UNAVAILABLE,
        missing ? OutcomeReasons.INBOX_TABLE_MISSING : OutcomeReasons.DATABASE_UNAVAILABLE,
        'the attempt of a redelivered message could not be counted before it ran',
        error,
      ),
    };
  }
  if (attempts === null) return { counted: false };
  if (attempts <= options.maxAttempts) return { counted: true };
  // This attempt will not run: only the ones that started and never ended stay counted.
  await store.uncountAttempt(options.db, message.id);
  const finished = attempts - 1;
  return {
    outcome: {
      status: 'dead-letter',
      messageId: message.id,
      consumer: options.consumer,
      reason: OutcomeReasons.MAX_ATTEMPTS_EXCEEDED,
      attempt: finished,
      error: new InboxError(
        InboxErrorCodes.MAX_ATTEMPTS_EXCEEDED,
        `${finished} attempts (maxAttempts ${options.maxAttempts}) started and ended without an outcome or failed: the process died or was killed while processing this message, or it kept failing; it is not run again`,
        { messageIds: [message.id], details: { consumer: options.consumer, attempt: finished, lastErrorCode: InboxErrorCodes.ATTEMPT_UNFINISHED } },
      ),
    },
  };
}

/** @internal True for the outcomes after which an attempt counted ahead is taken back: it ended without failing. */
export function endedWithoutFailing(outcome: InboxOutcome): boolean {
  return outcome.status === 'processed' || outcome.status === 'duplicate' || outcome.status === 'rejected';
}
