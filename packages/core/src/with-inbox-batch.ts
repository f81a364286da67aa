import { describeError } from './error-text.js';
import { InboxError, InboxErrorCodes, isInboxError } from './errors.js';
import { checkInboxTables } from './check-tables.js';
import { recordDeadLetter as recordDeadLetterRow } from './dead-letters.js';
import { internalFailure, outcomeOfFailure } from './failure.js';
import { ClaimRaceError, InboxStore } from './inbox-store.js';
import { assertHandler, resolveOptions, type InboxOptions, type ResolvedOptions } from './options.js';
import { handlerCopy, isOutcome, outcomeOfExisting, prepareMessage, type KnownRow, type PreparedMessage } from './prepare.js';
import { rejectionReason } from './rejection.js';
import { runHandler } from './run-handler.js';
import { runInboxTransaction } from './transaction.js';
import { AttemptLane, endedWithoutFailing, type RedeliveryStart, runSuspect, startRedeliveries } from './unfinished-attempts.js';
import type { HandlerResult } from './with-inbox.js';
import { isCounted } from './transaction-failures.js';
import {
  isRejection,
  OutcomeReasons,
  type AnyPgDatabase,
  type DeadLetterRecorder,
  type InboxBatchProcessor,
  type InboxMessage,
  type InboxOutcome,
  type ProcessOptions,
  type Rejection,
  type TransactionOf,
} from './types.js';

/** Context handed to a batch handler. */
export interface BatchHandlerContext {
  /** The consumer (dedup scope). */
  consumer: string;
  /** Fires at `handlerTimeoutMs` or when the consumer stops; see {@link HandlerContext.signal}. */
  signal: AbortSignal;
}

/**
 * Per-message business rejections returned by a batch handler, keyed by message id. Messages not
 * listed are `processed`.
 */
export type BatchRejections = ReadonlyMap<string, Rejection> | Readonly<Record<string, Rejection>>;

/**
 * A set-based handler: receives only the messages that are new to this consumer (duplicates
 * filtered out) and the transaction, so it can write all of them with one statement.
 */
export type InboxBatchHandler<TDb extends AnyPgDatabase, TPayload = unknown> = (
  messages: InboxMessage<TPayload>[],
  tx: TransactionOf<TDb>,
  context: BatchHandlerContext,
) => HandlerResult<BatchRejections>;

interface Slot<TPayload> {
  index: number;
  prepared: PreparedMessage<TPayload>;
  /** A redelivery whose attempt was counted before it ran (see unfinished-attempts.ts). */
  countedAhead?: boolean;
}

/** One processor call: the consumer's stop signal, and the heartbeat between its transactions (which also stops the call once that signal fired). */
interface Call {
  signal: AbortSignal | undefined;
  beat: () => Promise<void>;
}

/** The caller's heartbeat (see {@link ProcessOptions.heartbeat}) rejected: the call stops. */
class HeartbeatFailed extends Error {
  constructor(readonly original: unknown) {
    super(`the heartbeat failed: ${describeError(original)}`, { cause: original });
    this.name = 'HeartbeatFailed';
  }
}

/** A message a call did not run because its heartbeat failed: retried, not counted. */
function notRunAfterHeartbeat(options: ResolvedOptions<AnyPgDatabase, unknown>, delivery: unknown, error: unknown): InboxOutcome {
  const outcome = internalFailure(options, delivery, error);
  const { original } = error as HeartbeatFailed;
  return {
    ...outcome,
    error: new InboxError(InboxErrorCodes.INTERNAL_ERROR, `not run: the call's heartbeat failed before its turn (${describeError(original)})`, {
      cause: original,
      messageIds: [outcome.messageId],
    }),
  };
}

/**
 * The caller's stop signal fired between two transactions of one call (a split's halves, a
 * suspect's turn): the call starts no more. A handler started then would get a signal already
 * fired, so its failure, real or not, could not be counted; the batch failure that led to a split
 * is not any one message's until it is isolated.
 */
class StoppedBetweenTransactions extends Error {
  constructor() {
    super('the consumer began to stop before this message ran');
    this.name = 'StoppedBetweenTransactions';
  }
}

/** A message a call did not run because the consumer began to stop first: retried, not counted. */
function notRunAfterStop(options: ResolvedOptions<AnyPgDatabase, unknown>, delivery: unknown, error: unknown): InboxOutcome {
  const outcome = internalFailure(options, delivery, error);
  return {
    ...outcome,
    reason: OutcomeReasons.CONSUMER_STOPPING,
    error: new InboxError(InboxErrorCodes.CONSUMER_STOPPING, 'not run: the consumer began to stop before its turn in the call', {
      messageIds: [outcome.messageId],
    }),
  };
}

/** What one committed batch transaction decided: outcomes by input index, and the row now stored per id. */
interface Committed {
  outcomes: Map<number, InboxOutcome>;
  rows: Map<string, KnownRow>;
}

/**
 * How long a claim waits on a concurrent copy once one wait in this batch has already timed out.
 * The split halves that hold no busy id never wait; the ones that do should not wait the full
 * `lockTimeoutMs` again at every level of the split, since the copy holding the id already had it.
 * Short, because every busy id costs a wait at each level (about log2 of the batch size): at 100 ms,
 * 20 busy ids in a batch of 1,000 used up the split's budget and sent 705 innocent messages round again.
 */
const SPLIT_LOCK_WAIT_MS = 10;

/** How many transactions a split of `n` messages runs on the way to one of them: the batch, then one per halving. */
function splitLevels(n: number): number {
  return Math.ceil(Math.log2(Math.max(n, 1))) + 1;
}

/** The split's budget after a busy claim when `lockTimeoutMs` is `null` (the session's own lock_timeout timed out). */
const SPLIT_BUDGET_WITHOUT_LOCK_TIMEOUT_MS = 1000;

/**
 * What a batch handler returned, checked once: nothing, or a Map or plain record from ids of the
 * messages it was handed to `reject()` values. Anything else is a handler bug that would otherwise
 * be read silently as "all processed" (an array of rejections, a single `reject()`, a typo in an
 * id), so it fails the attempt, counted, with `INVALID_RESULT` saying what was wrong.
 */
function rejectionsOf(returned: unknown, ids: ReadonlySet<string>): Map<string, Rejection> {
  const invalid = (problem: string) =>
    new InboxError(
      InboxErrorCodes.INVALID_RESULT,
      `the batch handler returned ${problem}; return nothing, or a Map (or record) of message id to reject(reason)`,
    );
  if (returned === undefined || returned === null) return new Map();
  let entries: [unknown, unknown][];
  try {
    if (returned instanceof Map) entries = [...Map.prototype.entries.call(returned)];
    else if (isRejection(returned)) throw invalid('a single reject(); key it by message id');
    else if (Array.isArray(returned)) throw invalid('an array');
    else if (typeof returned === 'object' && [Object.prototype, null].includes(Object.getPrototypeOf(returned))) entries = Object.entries(returned);
    else throw invalid(`a ${typeof returned === 'object' ? 'non-plain object' : typeof returned}`);
  } catch (error) {
    if (isInboxError(error)) throw error;
    throw invalid(`a value that cannot be read (${describeError(error)})`);
  }
  const rejections = new Map<string, Rejection>();
  for (const [id, value] of entries) {
    if (typeof id !== 'string' || !ids.has(id))
      throw invalid(`a rejection for ${JSON.stringify(String(id)).slice(0, 120)}, not the id of a message it was handed`);
    if (!isRejection(value)) throw invalid(`a value for ${JSON.stringify(id).slice(0, 120)} that reject() did not make`);
    rejections.set(id, value);
  }
  return rejections;
}

/**
 * The outcome of a second copy of an id inside one batch, from its first copy's final outcome:
 * a copy of a message that was retried or dead-lettered shares that outcome; otherwise the copy is
 * judged against the row now stored, exactly like a redelivery (so a copy matching the stored
 * fingerprint is a duplicate even when the first copy conflicted). A duplicate of a message this
 * batch just processed carries reason `duplicate-in-batch`, unless it already has a reason.
 */
function outcomeOfCopy(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  copy: PreparedMessage<unknown>,
  leader: InboxOutcome,
  stored: KnownRow | undefined,
): InboxOutcome {
  if (leader.status === 'retry' || leader.status === 'dead-letter' || stored === undefined) return { ...leader, messageId: copy.message.id };
  const outcome = outcomeOfExisting(options, copy.message, copy.fingerprint, stored);
  const justProcessed = leader.status === 'processed' || leader.status === 'rejected';
  return outcome.status === 'duplicate' && outcome.reason === undefined && justProcessed ? { ...outcome, reason: OutcomeReasons.DUPLICATE_IN_BATCH } : outcome;
}

/**
 * Like {@link withInbox}, for batches: one transaction claims every message of the batch, runs the
 * handler once with the new ones, and commits. If the handler fails, the batch is split in halves
 * and each half retried, down to single messages, so one poison message is isolated (retried or
 * dead-lettered on its own) while its neighbours commit. A claim that times out on a concurrent copy
 * is split the same way, waiting only briefly from then on, so one busy id leaves just itself
 * `retry` (`in-progress`). Outcomes come back in input order.
 * A second copy of an id inside the same batch gets the outcome its first copy earned (see
 * `outcomeOfCopy`): `duplicate` (reason `duplicate-in-batch`) of a processed message, `conflict`
 * when its payload differs, the same `retry` or `dead-letter` when the first copy failed.
 */
export function withInboxBatch<TDb extends AnyPgDatabase, TPayload = unknown>(
  handler: InboxBatchHandler<TDb, NoInfer<TPayload>>,
  options: InboxOptions<TDb, TPayload>,
): InboxBatchProcessor {
  assertHandler(handler);
  if ((options as { mode?: unknown } | null)?.mode === 'leased') {
    throw new InboxError(
      InboxErrorCodes.INVALID_OPTIONS,
      "withInboxBatch has no leased mode: external effects are claimed, leased and completed one message at a time; use withInbox(handler, { mode: 'leased' })",
    );
  }
  const resolved = resolveOptions(options);
  const store = new InboxStore(resolved.tables, resolved.consumer);
  const suspects = new AttemptLane();
  const { consumer } = resolved;
  const general = resolved as unknown as ResolvedOptions<AnyPgDatabase, unknown>;

  /** One transaction for `slots`. */
  function runTransaction(slots: Slot<TPayload>[], lockTimeoutMs: number | null, signal: AbortSignal | undefined) {
    // Sorted claims take index locks in one global order, so overlapping batches cannot deadlock each other.
    const sorted = [...slots].sort((a, b) => (a.prepared.message.id < b.prepared.message.id ? -1 : 1));
    const rows = sorted.map(({ prepared: { message, fingerprint } }) => ({
      messageId: message.id,
      fingerprint,
      source: message.source,
      receivedAt: message.receivedAt,
    }));
    return runInboxTransaction(resolved, store, {
      rows,
      lockTimeoutMs,
      body: async (tx, claimed, handlerScope): Promise<Committed> => {
        const committed: Committed = { outcomes: new Map(), rows: new Map() };
        const fresh = slots.filter((slot) => claimed.has(slot.prepared.message.id));
        const known = slots.filter((slot) => !claimed.has(slot.prepared.message.id));
        if (known.length > 0) {
          const existing = await store.find(
            tx,
            known.map((slot) => slot.prepared.message.id),
          );
          for (const { index, prepared } of known) {
            const row = existing.get(prepared.message.id);
            if (row === undefined) throw new ClaimRaceError(prepared.message.id);
            committed.rows.set(prepared.message.id, row);
            committed.outcomes.set(index, outcomeOfExisting(general, prepared.message, prepared.fingerprint, row));
          }
        }
        if (fresh.length > 0) {
          const rejections = await runHandler(handlerScope, resolved.handlerTimeoutMs, signal, consumer, (handlerTx, deadline) =>
            handler(
              fresh.map((slot) => handlerCopy(slot.prepared.message)),
              handlerTx,
              { consumer, signal: deadline },
            ),
          );
          const rejectedIds = rejectionsOf(rejections, new Set(fresh.map((slot) => slot.prepared.message.id)));
          for (const {
            index,
            prepared: { message, fingerprint },
          } of fresh) {
            const rejection = rejectedIds.get(message.id);
            const attempt = message.attempt ?? 1;
            if (rejection === undefined) {
              committed.rows.set(message.id, { fingerprint, status: 'processed', reason: null });
              committed.outcomes.set(index, { status: 'processed', messageId: message.id, consumer, attempt });
            } else {
              const reason = rejectionReason(rejection);
              await store.markRejected(tx, message.id, reason);
              committed.rows.set(message.id, { fingerprint, status: 'rejected', reason });
              committed.outcomes.set(index, { status: 'rejected', messageId: message.id, consumer, reason, attempt });
            }
          }
        }
        return committed;
      },
    });
  }

  /**
   * Processes `slots`, splitting on a handler's failure until the failing message stands alone, on a
   * session that broke under the handler likewise, and on a busy claim until the busy id stands
   * alone (within one more `lockTimeoutMs` of waiting). Any other outage, or a missing table, is
   * nobody's fault: splitting would only repeat it per message.
   */
  async function isolate(
    slots: Slot<TPayload>[],
    into: (InboxOutcome | undefined)[],
    stored: Map<string, KnownRow>,
    wait: { lockTimeoutMs: number | null; busyUntil?: number; brokenLeft: number; call: Call },
  ): Promise<void> {
    const result = await runTransaction(slots, wait.lockTimeoutMs, wait.call.signal);
    if (result.ok) {
      for (const [index, outcome] of result.value.outcomes) into[index] = outcome;
      for (const [id, row] of result.value.rows) stored.set(id, row);
      return;
    }
    const { failure } = result;
    if (failure.kind === 'busy' && wait.busyUntil === undefined) {
      wait.busyUntil = Date.now() + (resolved.lockTimeoutMs ?? SPLIT_BUDGET_WITHOUT_LOCK_TIMEOUT_MS);
      if (wait.lockTimeoutMs !== null) wait.lockTimeoutMs = Math.min(wait.lockTimeoutMs, SPLIT_LOCK_WAIT_MS);
    }
    // A session that broke under the handler may be one message's doing (a statement that ends its
    // backend), so it splits too: the neighbours commit, and the culprit ends alone, uncounted like
    // any outage. In a real outage the halves fail at their claims, which do not split further. One
    // culprit breaks one transaction per level of the split; a budget of that many keeps sessions
    // that break whatever runs (a pooler ending long sessions, a link resetting them) from costing
    // 2n - 1 transactions per delivery: the groups left then are retried whole.
    const brokeUnderHandler = failure.kind === 'outage' && failure.underHandler === true && wait.brokenLeft-- > 0;
    const split = isCounted(failure) || brokeUnderHandler || (failure.kind === 'busy' && Date.now() < wait.busyUntil!);
    if (slots.length === 1 || !split) {
      for (const slot of slots) into[slot.index] = await outcomeOfFailure(general, store, slot.prepared.message, failure, slot.countedAhead === true);
      return;
    }
    const middle = Math.ceil(slots.length / 2);
    // In order, so a partition-ordered broker (Kafka) sees earlier messages settled first.
    await wait.call.beat();
    await isolate(slots.slice(0, middle), into, stored, wait);
    await wait.call.beat();
    await isolate(slots.slice(middle), into, stored, wait);
  }

  /** `slots` in one transaction (split on failure); the attempts counted ahead are taken back where they ended without failing. */
  async function runBatch(slots: Slot<TPayload>[], into: (InboxOutcome | undefined)[], stored: Map<string, KnownRow>, call: Call): Promise<void> {
    try {
      await isolate(slots, into, stored, { lockTimeoutMs: resolved.lockTimeoutMs, brokenLeft: splitLevels(slots.length), call });
    } finally {
      // Also when a failed heartbeat stopped the split: the halves that ran are settled.
      const settled = slots.filter((slot) => slot.countedAhead === true && into[slot.index] !== undefined && endedWithoutFailing(into[slot.index]!));
      await store.uncountAttempts(
        resolved.db,
        settled.map((slot) => slot.prepared.message.id),
      );
    }
  }

  /** A redelivery that failed or died before: alone, in the lane, its attempt counted when its turn comes. */
  async function runSuspectAlone(slot: Slot<TPayload>, into: (InboxOutcome | undefined)[], stored: Map<string, KnownRow>, call: Call): Promise<void> {
    into[slot.index] = await runSuspect(
      general,
      store,
      suspects,
      slot.prepared.message,
      async (countedAhead) => {
        await isolate([{ ...slot, countedAhead }], into, stored, { lockTimeoutMs: resolved.lockTimeoutMs, brokenLeft: 0, call });
        return into[slot.index]!;
      },
      call.signal,
    );
  }

  async function process(deliveries: readonly InboxMessage[], outcomes: (InboxOutcome | undefined)[], call: Call): Promise<void> {
    const leaders = new Map<string, Slot<TPayload>>();
    const copies: Slot<TPayload>[] = [];
    for (const [index, delivery] of deliveries.entries()) {
      const prepared = await prepareMessage(resolved, delivery);
      if (isOutcome(prepared)) {
        outcomes[index] = prepared;
      } else if (leaders.has(prepared.message.id)) {
        copies.push({ index, prepared });
        // One copy flagged redelivered makes the id one (it may have killed the process), whichever copy leads.
        const leader = leaders.get(prepared.message.id)!;
        if (prepared.message.redelivered === true && leader.prepared.message.redelivered !== true) {
          leader.prepared = { ...leader.prepared, message: { ...leader.prepared.message, redelivered: true } };
        }
      } else {
        leaders.set(prepared.message.id, { index, prepared });
      }
    }
    const stored = new Map<string, KnownRow>();
    const slots = [...leaders.values()];
    // Redeliveries may include a message that killed the process (see unfinished-attempts.ts): the
    // first-time ones are counted ahead and run with the others, in one transaction; the ones that
    // failed or died before run alone, in order, splitting the batch where they stand. The ones
    // after such a suspect are decided (and counted) once it ran.
    const planned: { slot: Slot<TPayload>; start: RedeliveryStart | undefined }[] = slots.map((slot) => ({ slot, start: undefined }));
    const decide = async (from: number) => {
      const pending = planned.slice(from).filter(({ slot }) => slot.prepared.message.redelivered === true);
      const starts = await startRedeliveries(
        general,
        store,
        pending.map(({ slot }) => slot.prepared.message),
      );
      for (const plan of pending) {
        plan.start = starts.get(plan.slot.prepared.message.id);
        if (plan.start?.kind === 'counted') plan.slot = { ...plan.slot, countedAhead: true };
      }
    };
    await decide(0);
    let batch: Slot<TPayload>[] = [];
    let started = false;
    const step = async (work: () => Promise<void>) => {
      if (started) await call.beat();
      started = true;
      await work();
    };
    const flush = async () => {
      const pending = batch;
      batch = [];
      if (pending.length > 0) await step(() => runBatch(pending, outcomes, stored, call));
    };
    try {
      for (let i = 0; i < planned.length; i++) {
        // After a suspect that ran: what follows it is decided now (joining the batch still open).
        if (planned[i]!.start?.kind === 'later') await decide(i);
        const { slot, start } = planned[i]!;
        if (start?.kind === 'outcome') {
          outcomes[slot.index] = start.outcome;
        } else if (start?.kind === 'suspect') {
          await flush();
          await step(() => runSuspectAlone(slot, outcomes, stored, call));
        } else {
          batch.push(slot);
        }
      }
      await flush();
    } catch (error) {
      // Stopped before some ran (a failed heartbeat, or a bug): their attempts, counted ahead, never started.
      const unstarted = planned.filter(({ slot }) => slot.countedAhead === true && outcomes[slot.index] === undefined);
      await store.uncountAttempts(
        resolved.db,
        unstarted.map(({ slot }) => slot.prepared.message.id),
      );
      throw error;
    }
    for (const { index, prepared } of copies) {
      const leader = leaders.get(prepared.message.id)!;
      outcomes[index] = outcomeOfCopy(general, prepared as PreparedMessage<unknown>, outcomes[leader.index]!, stored.get(prepared.message.id));
    }
  }

  const processor = async (deliveries: readonly InboxMessage[], options?: ProcessOptions): Promise<InboxOutcome[]> => {
    if (!Array.isArray(deliveries)) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'a batch processor takes an array of messages');
    const outcomes: (InboxOutcome | undefined)[] = new Array(deliveries.length);
    const heartbeat = options?.heartbeat;
    const beat = async () => {
      if (options?.signal?.aborted === true) throw new StoppedBetweenTransactions();
      if (heartbeat === undefined) return;
      try {
        await heartbeat();
      } catch (error) {
        throw new HeartbeatFailed(error);
      }
    };
    try {
      await process(deliveries, outcomes, { signal: options?.signal, beat });
    } catch (error) {
      // Outcomes already decided (some sub-batches may have committed) are kept; only the rest are retried.
      const notRun = error instanceof HeartbeatFailed ? notRunAfterHeartbeat : error instanceof StoppedBetweenTransactions ? notRunAfterStop : internalFailure;
      for (let index = 0; index < deliveries.length; index++) outcomes[index] ??= notRun(general, deliveries[index], error);
    }
    return outcomes as InboxOutcome[];
  };
  const checkTables = () => checkInboxTables(resolved.db, resolved.tables, consumer);
  const recordDeadLetter: DeadLetterRecorder = (outcome, place) => recordDeadLetterRow(resolved.db, resolved.tables, outcome, place);
  return Object.assign(processor, { kind: 'batch' as const, consumer, checkTables, observe: () => {}, recordDeadLetter, maxAttempts: resolved.maxAttempts });
}
