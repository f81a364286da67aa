import { classifyDatabaseError } from './database-errors.js';
import { InboxError, InboxErrorCodes } from './errors.js';
import { infrastructureRetry, outcomeOfFailure } from './failure.js';
import type { InboxStore } from './inbox-store.js';
import type { ResolvedOptions } from './options.js';
import { RollbackOnPurpose, runInboxTransaction } from './transaction.js';
import type { TransactionFailure } from './transaction-failures.js';
import { type AnyPgDatabase, type InboxMessage, type InboxOutcome, OutcomeReasons } from './types.js';

/*
 * Attempts that never finish. A failed attempt is counted after its transaction rolled back; a
 * message whose processing kills the process (out of memory, a native crash, `process.exit`, a
 * kill) never gets that far, so it came back uncounted after every restart, for ever. A delivery
 * the broker marks `redelivered` may be such a message's next copy: its attempt is counted before
 * the handler runs, in a statement of its own, and taken back when the attempt ends without
 * failing. Attempts that died stay counted, and once they exceed `maxAttempts` the message is
 * dead-lettered without running again.
 *
 * Attribution. After a death every delivery the process had in flight comes back redelivered, not
 * only the one that killed it. A redelivery with no attempts record (it never failed or died before)
 * is counted and run at once, alongside the others: a death then charges each one in flight, once.
 * A redelivery that has a record (it failed or died before: the suspects, the killer among them)
 * waits for the processor's lane, which runs such attempts one at a time, and is counted only when
 * its turn comes. So a death charges one suspect, the one that was running, and an innocent
 * message is charged at most once (the death that made it a suspect), never `maxAttempts` times.
 * Serialising every redelivery instead starved them all behind one message that broke the channel
 * each time it ran. A batch processor counts its call's first-time redeliveries in one statement and
 * runs them in one transaction with the call's other messages; its suspects run alone, in the lane.
 * The redeliveries after a suspect are counted once it ran, so a death while it runs charges it only.
 */

/** @internal Runs one attempt, `countedAhead` when its attempt was counted before it ran. */
export type RunAttempt = (countedAhead: boolean) => Promise<InboxOutcome>;

/**
 * @internal Runs a processor's suspect attempts one at a time (see above). A suspect handler that
 * never returns (no `handlerTimeoutMs`) holds the lane, and with it the processor's other suspects.
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

/**
 * @internal One attempt of a redelivered message (see above): `run(countedAhead)` runs it, counted
 * ahead or not (a duplicate); the count is taken back when it ends without failing. Attempts past
 * `maxAttempts` end dead-lettered without running; a database that cannot count it is the outage
 * retry (not counted, like any outage).
 */
export async function runRedelivered(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  lane: AttemptLane,
  message: InboxMessage,
  run: RunAttempt,
  signal?: AbortSignal,
): Promise<InboxOutcome> {
  const start = (await startRedeliveries(options, store, [message])).get(message.id)!;
  switch (start.kind) {
    case 'outcome':
      return start.outcome;
    case 'known':
      return run(false);
    case 'counted':
      return runCountedAhead(options, store, message, run);
    case 'suspect':
    case 'later': // (one message is never after a suspect: listed for completeness)
      return runSuspect(options, store, lane, message, run, signal);
  }
}

/**
 * @internal A redelivery that failed or died before (it has an attempts record): it waits for the
 * lane, and its attempt is counted when its turn comes (see above). If the consumer's stop `signal`
 * fired while it waited, it does not start: a handler started then would get a signal already
 * fired, and its failure could not be counted. It is retried, nothing counted.
 */
export function runSuspect(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  lane: AttemptLane,
  message: InboxMessage,
  run: RunAttempt,
  signal?: AbortSignal,
): Promise<InboxOutcome> {
  return lane.run(async () => {
    if (signal?.aborted === true) {
      const text = 'not started: the consumer began to stop while it waited for its turn';
      return infrastructureRetry(options, message, InboxErrorCodes.CONSUMER_STOPPING, OutcomeReasons.CONSUMER_STOPPING, text, undefined);
    }
    const turn = await startAttempt(options, store, message);
    if ('outcome' in turn) return turn.outcome;
    return turn.counted === null ? run(false) : attempt(options, store, message, turn.counted, run);
  });
}

/**
 * @internal How a batch's redelivery starts, decided for all of them in one statement:
 * - `known`: the id is in the inbox already, a duplicate; nothing counted;
 * - `counted`: a first-time redelivery, its attempt counted ahead; it runs with the batch's other
 *   messages (a death then charges each message in flight once, see above);
 * - `suspect`: it failed or died before; it runs alone, in the lane ({@link runSuspect});
 * - `outcome`: it does not run (the database could not count it);
 * - `later`: not decided, as it comes after a suspect: ask again once that suspect ran, so that no
 *   attempt is counted while the suspect runs alone (a death then would charge it too).
 */
export type RedeliveryStart = { kind: 'known' } | { kind: 'counted' } | { kind: 'suspect' } | { kind: 'later' } | { kind: 'outcome'; outcome: InboxOutcome };

/**
 * @internal Counts the first attempts of a batch's redelivered `messages` (distinct ids, in the
 * batch's order) ahead, up to the first suspect; see {@link RedeliveryStart}.
 */
export async function startRedeliveries(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  messages: readonly InboxMessage[],
): Promise<Map<string, RedeliveryStart>> {
  const starts = new Map<string, RedeliveryStart>();
  if (messages.length === 0) return starts;
  let counted: Map<string, { decided: boolean; known: boolean; counted: number | null }>;
  try {
    counted = await store.startFirstAttempts(
      options.db,
      messages.map((message) => message.id),
    );
  } catch (error) {
    for (const message of messages) starts.set(message.id, { kind: 'outcome', outcome: notCounted(options, message, error) });
    return starts;
  }
  for (const message of messages) {
    const start = counted.get(message.id);
    if (start !== undefined && !start.decided) starts.set(message.id, { kind: 'later' });
    else if (start === undefined || start.known) starts.set(message.id, { kind: 'known' });
    else if (start.counted === null) starts.set(message.id, { kind: 'suspect' });
    // Counted for the first time: it runs, even past maxAttempts (only a concurrent copy counting
    // it too can put it there, and the claim lets one of the two run).
    else starts.set(message.id, { kind: 'counted' });
  }
  return starts;
}

/** A suspect's attempt at its turn, `counted` the attempts counted now (this one included). */
async function attempt(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  message: InboxMessage,
  counted: number,
  run: RunAttempt,
): Promise<InboxOutcome> {
  if (counted > options.maxAttempts) return spentUnlessClaimed(options, store, message, counted - 1, run);
  return runCountedAhead(options, store, message, run);
}

/**
 * A suspect whose attempts are spent, unless another copy has the id. A copy in flight counts its
 * attempt too, ahead, so it can spend this copy's budget while it processes the message (with
 * `maxAttempts: 1`, any copy redelivered beside another). Dead-lettering this copy then would put a
 * message into the dead-letter target that the other copy commits. So this copy first waits for a
 * claim held on the id, as a claim would: committed, it is a duplicate (or a conflict), judged as
 * usual; rolled back or none, the attempts are spent. Either way this attempt does not run, so its
 * count is taken back. Left open: a copy that counted but holds no claim at this moment is not
 * waited for: one that has not sent its claim yet (a statement apart, longer while its transaction
 * waits for a pool connection or its batch's claim waits on another id), or whose batch rolled back
 * and claims again after a split. A spent copy arriving then is still dead-lettered beside a copy
 * that commits (nothing is lost or applied twice; replayed, it is a duplicate).
 */
async function spentUnlessClaimed(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  message: InboxMessage,
  finished: number,
  run: RunAttempt,
): Promise<InboxOutcome> {
  const probe = await claimOnceSettled(options, store, message);
  // Busy past lockTimeoutMs, or the database away: retried, not counted, like a claim that failed so.
  if ('failure' in probe) return outcomeOfFailure(options, store, message, probe.failure, true);
  await store.uncountAttempt(options.db, message.id);
  return probe.known ? run(false) : spent(options, message, finished);
}

/**
 * Whether the id is in the inbox, after waiting for a copy that holds its claim uncommitted: the
 * claim itself (a read would not wait: it does not see an uncommitted claim), in an inbox
 * transaction the body rolls back whatever it found, so nothing is written. It goes through the
 * driver's own transaction path, which handles a connection that drops while it waits.
 */
async function claimOnceSettled(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  message: InboxMessage,
): Promise<{ known: boolean } | { failure: TransactionFailure }> {
  let known = false;
  const result = await runInboxTransaction(options, store, {
    rows: [{ messageId: message.id, fingerprint: null, source: message.source, receivedAt: message.receivedAt }],
    lockTimeoutMs: options.lockTimeoutMs,
    operation: 'probe',
    body: async (_tx, claimed) => {
      known = !claimed.has(message.id);
      throw new RollbackOnPurpose('the probe rolls back whatever it found');
    },
  });
  if (result.ok) throw new Error('a probe committed'); // its body always throws
  return result.failure.error instanceof RollbackOnPurpose ? { known } : { failure: result.failure };
}

/** Runs an attempt counted ahead, and takes the count back when it ends without failing. */
async function runCountedAhead(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  message: InboxMessage,
  run: RunAttempt,
): Promise<InboxOutcome> {
  const outcome = await run(true);
  if (endedWithoutFailing(outcome)) await store.uncountAttempt(options.db, message.id);
  return outcome;
}

/** `store.startAttempt`, or the outage retry when the database cannot answer. */
async function startAttempt(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  store: InboxStore,
  message: InboxMessage,
): Promise<{ known: boolean; counted: number | null } | { outcome: InboxOutcome }> {
  try {
    return await store.startAttempt(options.db, message.id);
  } catch (error) {
    return { outcome: notCounted(options, message, error) };
  }
}

/** The outage retry of a redelivery whose attempt the database could not count (not counted, like any outage). */
function notCounted(options: ResolvedOptions<AnyPgDatabase, unknown>, message: InboxMessage, error: unknown): InboxOutcome {
  const missing = classifyDatabaseError(error) === 'schema-missing';
  return infrastructureRetry(
    options,
    message,
    missing ? InboxErrorCodes.INBOX_TABLE_MISSING : InboxErrorCodes.DATABASE_UNAVAILABLE,
    missing ? OutcomeReasons.INBOX_TABLE_MISSING : OutcomeReasons.DATABASE_UNAVAILABLE,
    'the attempt of a redelivered message could not be counted before it ran',
    error,
  );
}

/** The dead-letter of a message whose attempts are spent: it is not run again. */
function spent(options: ResolvedOptions<AnyPgDatabase, unknown>, message: InboxMessage, finished: number): InboxOutcome {
  return {
    status: 'dead-letter',
    messageId: message.id,
    consumer: options.consumer,
    reason: OutcomeReasons.MAX_ATTEMPTS_EXCEEDED,
    attempt: finished,
    error: new InboxError(
      InboxErrorCodes.MAX_ATTEMPTS_EXCEEDED,
      `${finished} attempts (maxAttempts ${options.maxAttempts}) failed or started and ended without an outcome (the process died or was killed while processing this message); it is not run again`,
      { messageIds: [message.id], details: { consumer: options.consumer, attempt: finished } },
    ),
  };
}

/** @internal True for the outcomes after which an attempt counted ahead is taken back: it ended without failing. */
export function endedWithoutFailing(outcome: InboxOutcome): boolean {
  // `conflict`: the id is known with another payload; nothing ran.
  return outcome.status === 'processed' || outcome.status === 'duplicate' || outcome.status === 'rejected' || outcome.status === 'conflict';
}
