import { classifyDatabaseError } from './database-errors.js';
import { ClaimFailure, outcomeOfFailure } from './failure.js';
import { InboxStore } from './inbox-store.js';
import { resolveOptions, type InboxOptions, type ResolvedOptions } from './options.js';
import { isOutcome, outcomeOfExisting, prepareMessage, type PreparedMessage } from './prepare.js';
import { claimTransaction } from './transaction.js';
import {
  isRejection,
  OutcomeReasons,
  type AnyPgDatabase,
  type InboxBatchProcessor,
  type InboxMessage,
  type InboxOutcome,
  type Rejection,
  type TransactionOf,
} from './types.js';

/** Context handed to a batch handler. */
export interface BatchHandlerContext {
  /** The consumer (dedup scope). */
  consumer: string;
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
) => Promise<void | BatchRejections> | void | BatchRejections;

interface Slot<TPayload> {
  index: number;
  prepared: PreparedMessage<TPayload>;
}

function rejectionOf(rejections: void | BatchRejections, messageId: string): Rejection | undefined {
  if (rejections === undefined || rejections === null) return undefined;
  const value = rejections instanceof Map ? rejections.get(messageId) : (rejections as Record<string, Rejection>)[messageId];
  return isRejection(value) ? value : undefined;
}

/**
 * Like {@link withInbox}, for batches: one transaction claims every message of the batch, runs the
 * handler once with the new ones, and commits. If that fails, the batch is split in halves and
 * each half retried, down to single messages, so one poison message is isolated (retried or
 * dead-lettered on its own) while its neighbours commit. Outcomes come back in input order.
 * A second copy of an id inside the same batch is a `duplicate` of the first (reason
 * `duplicate-in-batch`) or a `conflict` when its payload differs.
 */
export function withInboxBatch<TDb extends AnyPgDatabase, TPayload = unknown>(
  handler: InboxBatchHandler<TDb, TPayload>,
  options: InboxOptions<TDb, TPayload>,
): InboxBatchProcessor {
  const resolved = resolveOptions(options);
  const store = new InboxStore(resolved.tables, resolved.consumer, resolved.lockTimeoutMs);
  const { consumer } = resolved;
  const general = resolved as unknown as ResolvedOptions<AnyPgDatabase, unknown>;

  /** One transaction for `slots`; returns their outcomes, or throws when the transaction failed. */
  async function runTransaction(slots: Slot<TPayload>[]): Promise<Map<number, InboxOutcome>> {
    // Sorted claims take index locks in one global order, so overlapping batches cannot deadlock each other.
    const sorted = [...slots].sort((a, b) => (a.prepared.message.id < b.prepared.message.id ? -1 : 1));
    const rows = sorted.map(({ prepared: { message, fingerprint } }) => ({
      messageId: message.id, fingerprint, source: message.source, receivedAt: message.receivedAt,
    }));
    return claimTransaction(resolved, store, rows, async (tx, claimed) => {
      const outcomes = new Map<number, InboxOutcome>();
      const fresh = slots.filter((slot) => claimed.has(slot.prepared.message.id));
      const known = slots.filter((slot) => !claimed.has(slot.prepared.message.id));
      if (known.length > 0) {
        const existing = await store.find(tx, known.map((slot) => slot.prepared.message.id));
        for (const { index, prepared } of known) {
          const row = existing.get(prepared.message.id);
          if (row === undefined) throw new Error(`inbox row of ${prepared.message.id} vanished between claim and read`);
          outcomes.set(index, outcomeOfExisting(general, prepared.message, prepared.fingerprint, row));
        }
      }
      if (fresh.length > 0) {
        const rejections = await handler(fresh.map((slot) => slot.prepared.message), tx, { consumer });
        for (const { index, prepared: { message } } of fresh) {
          const rejection = rejectionOf(rejections, message.id);
          const attempt = message.attempt ?? 1;
          if (rejection === undefined) {
            outcomes.set(index, { status: 'processed', messageId: message.id, consumer, attempt });
          } else {
            await store.markRejected(tx, message.id, rejection.reason);
            outcomes.set(index, { status: 'rejected', messageId: message.id, consumer, reason: rejection.reason, attempt });
          }
        }
      }
      return outcomes;
    });
  }

  /** Processes `slots`, splitting on failure until the failing message stands alone. */
  async function isolate(slots: Slot<TPayload>[], into: (InboxOutcome | undefined)[]): Promise<void> {
    try {
      for (const [index, outcome] of await runTransaction(slots)) into[index] = outcome;
      return;
    } catch (error) {
      const cause = error instanceof ClaimFailure ? error.original : error;
      // An outage or a lock wait is nobody's fault: splitting would only repeat it per message.
      const kind = classifyDatabaseError(cause);
      const notTheMessagesFault = kind === 'unavailable' || (error instanceof ClaimFailure && kind !== undefined);
      if (slots.length === 1 || notTheMessagesFault) {
        for (const { index, prepared } of slots) into[index] = await outcomeOfFailure(general, store, prepared.message, error);
        return;
      }
      const middle = Math.ceil(slots.length / 2);
      // In order, so a partition-ordered broker (Kafka) sees earlier messages settled first.
      await isolate(slots.slice(0, middle), into);
      await isolate(slots.slice(middle), into);
    }
  }

  const processor = async (deliveries: readonly InboxMessage[]): Promise<InboxOutcome[]> => {
    const outcomes: (InboxOutcome | undefined)[] = new Array(deliveries.length);
    const leaders = new Map<string, Slot<TPayload>>();
    const copies: Slot<TPayload>[] = [];
    deliveries.forEach((delivery, index) => {
      const prepared = prepareMessage(resolved, delivery);
      if (isOutcome(prepared)) {
        outcomes[index] = prepared;
      } else if (leaders.has(prepared.message.id)) {
        copies.push({ index, prepared });
      } else {
        leaders.set(prepared.message.id, { index, prepared });
      }
    });
    if (leaders.size > 0) await isolate([...leaders.values()], outcomes);
    for (const { index, prepared } of copies) {
      const leader = leaders.get(prepared.message.id)!;
      const outcome = outcomeOfExisting(general, prepared.message, prepared.fingerprint, {
        fingerprint: leader.prepared.fingerprint,
        status: 'processed',
        reason: null,
      });
      outcomes[index] = outcome.status === 'duplicate' ? { ...outcome, reason: OutcomeReasons.DUPLICATE_IN_BATCH } : outcome;
    }
    return outcomes as InboxOutcome[];
  };
  return Object.assign(processor, { kind: 'batch' as const, consumer });
}
