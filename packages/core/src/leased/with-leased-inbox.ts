import { checkInboxTables } from '../check-tables.js';
import { recordDeadLetter as recordDeadLetterRow } from '../dead-letters.js';
import { InboxError, InboxErrorCodes } from '../errors.js';
import { inboxStatementFailure, infrastructureRetry, internalFailure, outcomeOfFailure } from '../failure.js';
import { failedWhileStopping, runWithDeadline } from '../handler-deadline.js';
import { InboxStatementError, InboxStore } from '../inbox-store.js';
import { resolveLeaseMs, resolveOptions, type LeasedInboxOptions, type ResolvedOptions } from '../options.js';
import { boundedBusyDelay, handlerCopy, isOutcome, outcomeOfExisting, prepareMessage } from '../prepare.js';
import { completionOf, type Completion } from '../handler-result.js';
import { parseStoredResult, type StoredResult } from '../stored-result.js';
import { bodyFailure, claimFailure, type TransactionFailure } from '../transaction-failures.js';
import { runHandler } from '../run-handler.js';
import { runInboxTransaction } from '../transaction.js';
import {
  OutcomeReasons,
  type AnyPgDatabase,
  type DeadLetterRecorder,
  type HandlerContext,
  type InboxMessage,
  type InboxOutcome,
  type InboxProcessor,
  type ProcessOptions,
  type Rejection,
  type TransactionOf,
} from '../types.js';
import type { HandlerResult } from '../with-inbox.js';
import { idempotencyKeyFor } from './idempotency-key.js';
import { Lease, leaseLostError } from './lease.js';
import { type ClaimFence, LeaseStore } from './lease-store.js';

/** What a leased handler is handed next to the message. */
export interface LeasedHandlerContext<TDb extends AnyPgDatabase = AnyPgDatabase> extends HandlerContext {
  /**
   * Pass it to the provider as its idempotency key (`Idempotency-Key` header, `idempotency_key`
   * field): the same for this consumer and message id on every attempt, takeover and process, so a
   * provider that honours it performs the effect once even if this handler runs twice.
   */
  idempotencyKey: string;
  /** This claim's fencing token: 1 on the first claim, higher on every later one (after a failure or takeover). */
  fencingToken: number;
  /**
   * True when an earlier attempt's lease ran out without completing (a crash, a hang): it may or may
   * not have reached the provider. A failed attempt that released its claim does not set it, and it
   * may have reached the provider too: whenever `fencingToken > 1`, ask the provider what happened
   * (look the idempotency key up) before acting again.
   */
  takeover: boolean;
  /**
   * Fires when the handler should stop: the lease is lost (it ran out, or another worker took the
   * claim over), `handlerTimeoutMs` passed, or the consumer is stopping. After a lost lease the
   * completion will be refused, so stop before starting another external call.
   */
  signal: AbortSignal;
  /** Extends the lease by `leaseMs` from now (server time), for long work. Rejects with `LEASE_LOST` once it is lost. */
  renewLease(): Promise<void>;
  /**
   * Adds local writes to the completion: after the handler returns, `work(tx)` runs in the one
   * transaction that records the completion, fenced by the token, so they commit exactly when the
   * message is recorded as completed by this claim, or not at all. Call it during the handler.
   */
  complete(work: (tx: TransactionOf<TDb>) => Promise<unknown> | unknown): void;
}

/**
 * A leased-mode handler: it runs outside any database transaction (do the external call here, with
 * `context.idempotencyKey`), then returns nothing, `storeResult(value)` or `reject(reason)`. Throw to
 * fail: retried (counted) or dead-lettered, as in transactional mode.
 */
export type LeasedInboxHandler<TDb extends AnyPgDatabase, TPayload = unknown> = (
  message: InboxMessage<TPayload>,
  context: LeasedHandlerContext<TDb>,
) => HandlerResult<Rejection | StoredResult>;

/** Thrown inside the completion transaction when the fence refuses this token's completion. */
class FencedOff extends Error {}

/**
 * @internal `withInbox(handler, { mode: 'leased' })`. Per delivery:
 * 1. claim: one committed statement makes this worker the owner (token, lease on server time), or
 *    answers `duplicate`/`conflict` (completed), or `busy` (someone else's live lease);
 * 2. the handler runs outside any transaction, its signal tied to the lease;
 * 3. completion: one transaction writes `processed`/`rejected` (and the stored result) only while the
 *    row is still this token's open claim, plus the handler's `complete(tx => ...)` writes; a refused
 *    fence is `retry` with `lease-lost`, not counted, and nothing of it is written;
 * 4. failure: counted in the attempts ledger as in transactional mode, and the claim released so
 *    the next delivery takes it at once (a higher token, `takeover: false`).
 * An attempt that never got to 3 or 4 (its worker died: a kill, out of memory) is counted by the
 * claim that takes its expired lease over, so a message that kills every worker ends dead-lettered
 * once `maxAttempts` are spent (the spent-budget stop below) instead of being taken over for ever.
 */
export function withLeasedInbox<TDb extends AnyPgDatabase, TPayload>(
  handler: LeasedInboxHandler<TDb, TPayload>,
  options: LeasedInboxOptions<TDb, TPayload>,
): InboxProcessor {
  const resolved = resolveOptions(options);
  const leaseMs = resolveLeaseMs(options);
  const general = resolved as unknown as ResolvedOptions<AnyPgDatabase, unknown>;
  const store = new InboxStore(resolved.tables, resolved.consumer);
  const leases = new LeaseStore(store, resolved.consumer);
  const { consumer, db } = resolved;
  const strictFingerprint = resolved.onPayloadMismatch === 'conflict';

  async function process(delivery: InboxMessage, processOptions: ProcessOptions | undefined): Promise<InboxOutcome> {
    const prepared = await prepareMessage(resolved, delivery);
    if (isOutcome(prepared)) return prepared;
    const { message, fingerprint } = prepared;
    const attempt = message.attempt ?? 1;
    await store.pinSchema(db);

    const claimSentAt = performance.now();
    let claim: Awaited<ReturnType<LeaseStore['claim']>>;
    try {
      claim = await leases.claim(
        db,
        { messageId: message.id, fingerprint, source: message.source, receivedAt: message.receivedAt },
        leaseMs,
        strictFingerprint,
        resolved.lockTimeoutMs,
      );
    } catch (error) {
      return outcomeOfFailure(general, store, message, claimFailure(error));
    }
    if (claim.kind === 'existing') return outcomeOfExisting(general, message, fingerprint, { ...claim, leaseRemainingMs: null });
    if (claim.kind === 'busy') {
      const error = new InboxError(InboxErrorCodes.LEASE_HELD, `another worker of ${JSON.stringify(consumer)} holds a live lease on this message`, {
        messageIds: [message.id],
      });
      return {
        status: 'busy',
        messageId: message.id,
        consumer,
        attempt,
        reason: OutcomeReasons.LEASE_HELD,
        error,
        retryAfterMs: boundedBusyDelay(claim.remainingMs, leaseMs),
      };
    }

    const { token, takeover } = claim;
    const lease = new Lease(leases, db, message.id, { token, claimedAt: claim.claimedAt }, leaseMs, claimSentAt);
    const leased = { fencingToken: token, takeover };
    if (token > 1 && claim.attempts >= resolved.maxAttempts) {
      // The message was claimed before and its budget is spent: typically attempts overtaken one by
      // one by the next copy's takeover (counted, but each claim was no longer theirs to
      // dead-letter). This claim's holder ends it instead of running the handler once more, counting
      // nothing more: no attempt was made.
      lease.dispose();
      const spent = new InboxError(
        InboxErrorCodes.HANDLER_FAILED,
        `${claim.attempts} attempts were already counted (maxAttempts ${resolved.maxAttempts}); the handler was not run again`,
        { messageIds: [message.id] },
      );
      return { ...(await failed(message, lease, { kind: 'handler', error: spent }, true)), ...leased };
    }
    try {
      const completions: ((tx: TransactionOf<TDb>) => unknown)[] = [];
      let open = true;
      let completion: Completion;
      try {
        const returned = await runWithDeadline(
          resolved.handlerTimeoutMs,
          processOptions?.signal === undefined ? lease.signal : AbortSignal.any([lease.signal, processOptions.signal]),
          async (signal) =>
            handler(handlerCopy(message as InboxMessage<TPayload>), {
              consumer,
              attempt,
              signal,
              idempotencyKey: idempotencyKeyFor(consumer, message.id),
              fencingToken: token,
              takeover,
              renewLease: () => lease.renew(),
              complete: (work) => {
                if (!open) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'context.complete() was called after the handler returned');
                if (typeof work !== 'function') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'context.complete() takes a function (tx) => ...');
                completions.push(work as (tx: TransactionOf<TDb>) => unknown);
              },
            }),
          undefined,
          consumer,
        );
        // Reading the returned value is part of the handler's attempt: a value that throws when
        // inspected fails it (counted, claim released) like a throw inside the handler.
        completion = completionOf(returned);
      } catch (error) {
        return { ...(await failed(message, lease, bodyFailure(failedWhileStopping(error, processOptions?.signal?.aborted === true)))), ...leased };
      } finally {
        open = false;
      }

      const result = await runInboxTransaction(resolved, store, {
        rows: [],
        lockTimeoutMs: null,
        verifyIds: [message.id],
        body: async (tx, _claimed, completionScope) => {
          let completed: boolean;
          try {
            completed = await leases.complete(tx, message.id, lease.fence, completion);
          } catch (error) {
            throw new InboxStatementError('complete', error);
          }
          if (!completed) throw new FencedOff();
          // The completions are the handler's code: under its deadline, their savepoints watched,
          // their tx ended as soon as they settle. Not recorded as a second handler duration.
          await runHandler(completionScope, resolved.handlerTimeoutMs, undefined, undefined, async (completionTx) => {
            for (const work of completions) await work(completionTx);
          });
        },
      });
      if (result.ok) {
        const base = { messageId: message.id, consumer, attempt, ...leased };
        return completion.status === 'rejected'
          ? { ...base, status: 'rejected', reason: completion.reason }
          : completion.result === null
            ? { ...base, status: 'processed' }
            : { ...base, status: 'processed', result: parseStoredResult(completion.result) };
      }
      if (result.failure.kind === 'handler' && result.failure.error instanceof FencedOff) {
        // The claim changed hands: the fence refused the completion, and would refuse a release or a
        // count just the same. The takeover counted this attempt if it ran past its lease (so one
        // that always overruns still ends in dead-letter); one that finished in time is not counted.
        return { ...leaseLost(message, token), ...leased };
      }
      return { ...(await failed(message, lease, result.failure)), ...leased };
    } catch (error) {
      // inboxed itself failed after the claim committed: give the claim back (fenced) so the
      // redelivery takes it at once instead of answering `busy` until the lease runs out.
      await releaseQuietly(message.id, lease.fence);
      return { ...internalFailure(general, message, error), ...leased };
    } finally {
      lease.dispose();
    }
  }

  /**
   * Gives a claim back, fenced: true when released, false when the claim was no longer this
   * worker's, or the error when the database could not be asked (the lease then runs out instead).
   */
  async function releaseQuietly(messageId: string, fence: ClaimFence): Promise<boolean | { error: unknown }> {
    try {
      return await leases.release(db, messageId, fence);
    } catch (error) {
      return { error };
    }
  }

  /** `retry` with `lease-lost`: not counted (this attempt did not fail, it was overtaken). */
  function leaseLost(message: InboxMessage, token: number): InboxOutcome {
    return {
      status: 'retry',
      messageId: message.id,
      consumer,
      attempt: message.attempt ?? 1,
      reason: OutcomeReasons.LEASE_LOST,
      error: leaseLostError(message.id, token, 'its completion was refused by the fence: the claim was taken over or released'),
      // The new owner is at work: come back once it has had time to complete (then: a duplicate).
      retryAfterMs: Math.min(leaseMs, 60_000),
    };
  }

  /**
   * A failed attempt, judged as in transactional mode (a handler that threw because its lease was
   * lost is counted too: it ran past `leaseMs` without renewing). Each attempt is counted once, by
   * exactly one of two parties:
   * - still this worker's claim: given back and counted here, in one statement (both or neither);
   * - taken over meanwhile (this lease ran out): by the takeover, which found the lease expired.
   *   Nothing is done here, and the message is the new owner's to finish: dead-lettering this copy
   *   would send one its new owner may yet process;
   * - not given back (the database could not be reached): by the takeover once the lease runs out.
   *   (An outage, not counted in transactional mode, then costs that one attempt: the takeover
   *   cannot tell it from a worker that died.)
   * A failure that is not counted (an outage, a busy row) only gives the claim back.
   * `countedAhead`: the attempt is already counted (the spent-budget stop); only its outcome is decided.
   */
  async function failed(message: InboxMessage, lease: Lease, failure: TransactionFailure, countedAhead = false): Promise<InboxOutcome> {
    let held: boolean | undefined;
    const counting = {
      recordFailure: async (_ledger: unknown, messageId: string, error: { message: string; code: string }, counted?: boolean) => {
        const record = await leases.releaseCounting(db, messageId, lease.fence, error, counted === true);
        held = record !== undefined;
        if (record === undefined) throw leaseLostError(messageId, lease.token, 'the claim was taken over before this attempt was counted');
        return record;
      },
      uncountAttempt: (ledger: Parameters<InboxStore['uncountAttempt']>[0], messageId: string) => store.uncountAttempt(ledger, messageId),
    };
    const outcome = await outcomeOfFailure(general, counting, message, failure, countedAhead);
    if (held === false) return leaseLost(message, lease.token);
    if (held === true) return outcome;
    // Not counted here: an uncounted failure, or the counting statement did not go through.
    const released = await releaseQuietly(message.id, lease.fence);
    if (released === false) return leaseLost(message, lease.token);
    if (released !== true) {
      // Said as what the database answered: an outage, inbox tables that changed under the
      // consumer (a migration in progress), or an inbox statement that failed for another reason.
      const [code, reason] = inboxStatementFailure(released.error);
      return infrastructureRetry(
        general,
        message,
        code,
        reason,
        `the attempt failed (${failure.kind}) and its claim could not be given back; the lease runs out and the next delivery's takeover counts it`,
        released.error,
      );
    }
    return outcome;
  }

  const processor = (delivery: InboxMessage, options?: ProcessOptions): Promise<InboxOutcome> =>
    process(delivery, options).catch((error: unknown) => internalFailure(general, delivery, error));
  const checkTables = () => checkInboxTables(db, resolved.tables, consumer);
  const recordDeadLetter: DeadLetterRecorder = (outcome, place) => recordDeadLetterRow(db, resolved.tables, outcome, place);
  return Object.assign(processor, { kind: 'single' as const, consumer, checkTables, observe: () => {}, recordDeadLetter, maxAttempts: resolved.maxAttempts });
}
