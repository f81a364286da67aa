import { checkInboxTables } from './check-tables.js';
import { recordDeadLetter as recordDeadLetterRow } from './dead-letters.js';
import { internalFailure, outcomeOfFailure } from './failure.js';
import { ClaimRaceError, InboxStore } from './inbox-store.js';
import { withLeasedInbox, type LeasedInboxHandler } from './leased/with-leased-inbox.js';
import { assertHandler, resolveOptions, type InboxOptions, type LeasedInboxOptions, type ResolvedOptions } from './options.js';
import { handlerCopy, isOutcome, outcomeOfExisting, prepareMessage } from './prepare.js';
import { AttemptLane, runRedelivered } from './unfinished-attempts.js';
import { completionOf } from './handler-result.js';
import { runInboxTransaction } from './transaction.js';
import { runHandler } from './run-handler.js';
import { parseStoredResult, type StoredResult } from './stored-result.js';
import type {
  AnyPgDatabase,
  DeadLetterRecorder,
  HandlerContext,
  InboxMessage,
  InboxOutcome,
  InboxProcessor,
  ProcessOptions,
  Rejection,
  TransactionOf,
} from './types.js';

/**
 * What a handler returns: nothing, or a value the inbox records.
 */
// biome-ignore lint/suspicious/noConfusingVoidType: handlers return nothing; `undefined` here would refuse `async () => {}`.
export type HandlerResult<T> = Promise<void | T> | void | T;

/**
 * Your message handler. Make every database change through `tx`, the Drizzle transaction of your
 * own `db`: it commits together with the inbox row, or not at all. Return nothing for success,
 * `storeResult(value)` to record a small JSON result that every later duplicate gets back, or
 * `reject(reason)` for a stable business rejection; throw to fail (retried unless permanent).
 */
export type InboxHandler<TDb extends AnyPgDatabase, TPayload = unknown> = (
  message: InboxMessage<TPayload>,
  tx: TransactionOf<TDb>,
  context: HandlerContext,
) => HandlerResult<Rejection | StoredResult>;

/**
 * Wraps a handler so that, for one consumer and one message id, its database effect commits at
 * most once. Per delivery: one transaction that claims `(consumer, message id)` under the inbox's
 * unique key, runs the handler, records the outcome and commits. The returned processor never
 * throws for a message's sake; it resolves to an {@link InboxOutcome} the broker adapter acts on.
 *
 * The payload's type comes from `schema` (any Standard Schema validator) or `parse`, which also
 * check it at run time; without either it is `unknown`, unless you state it:
 * `withInbox<typeof db, Order>(handler, options)`.
 *
 * ```ts
 * const Order = z.object({ orderId: z.string() });
 * const process = withInbox(async (message, tx) => {
 *   await tx.insert(orders).values({ id: message.payload.orderId });
 * }, { db, consumer: 'billing.order-created', schema: Order });
 * const outcome = await process({ id: 'msg-1', payload: { orderId: 'o-42' } });
 * ```
 */
export function withInbox<TDb extends AnyPgDatabase, TPayload = unknown>(
  handler: InboxHandler<TDb, NoInfer<TPayload>>,
  options: InboxOptions<TDb, TPayload>,
): InboxProcessor;
/**
 * Leased mode, for a handler whose effect is outside the database (a payment provider, an email
 * API). The claim commits first, with a lease on server time and a fencing token; the handler runs
 * outside any transaction and gets `context.idempotencyKey` for the provider, `takeover`,
 * `renewLease()`, a signal tied to the lease and `complete(tx => ...)` for local follow-up writes;
 * the completion commits only while the claim is still this worker's. See {@link LeasedInboxOptions}.
 *
 * ```ts
 * const process = withInbox(async (message, { idempotencyKey, takeover, signal }) => {
 *   const charge = (takeover && (await payments.find(idempotencyKey))) || (await payments.charge(message.payload, { idempotencyKey, signal }));
 *   return storeResult({ chargeId: charge.id });
 * }, { db, consumer: 'billing.charge', mode: 'leased', leaseMs: 30_000 });
 * ```
 */
export function withInbox<TDb extends AnyPgDatabase, TPayload = unknown>(
  handler: LeasedInboxHandler<TDb, NoInfer<TPayload>>,
  options: LeasedInboxOptions<TDb, TPayload>,
): InboxProcessor;
export function withInbox<TDb extends AnyPgDatabase, TPayload = unknown>(
  handler: InboxHandler<TDb, TPayload> | LeasedInboxHandler<TDb, TPayload>,
  options: InboxOptions<TDb, TPayload> | LeasedInboxOptions<TDb, TPayload>,
): InboxProcessor {
  assertHandler(handler);
  if ((options as { mode?: unknown } | null)?.mode === 'leased') {
    return withLeasedInbox(handler as LeasedInboxHandler<TDb, TPayload>, options as LeasedInboxOptions<TDb, TPayload>);
  }
  return withTransactionalInbox(handler as InboxHandler<TDb, TPayload>, options as InboxOptions<TDb, TPayload>);
}

function withTransactionalInbox<TDb extends AnyPgDatabase, TPayload>(
  handler: InboxHandler<TDb, TPayload>,
  options: InboxOptions<TDb, TPayload>,
): InboxProcessor {
  const resolved = resolveOptions(options);
  const general = resolved as unknown as ResolvedOptions<AnyPgDatabase, unknown>;
  const store = new InboxStore(resolved.tables, resolved.consumer);
  const { consumer } = resolved;
  const suspects = new AttemptLane();

  async function process(delivery: InboxMessage, options: ProcessOptions | undefined): Promise<InboxOutcome> {
    const prepared = await prepareMessage(resolved, delivery);
    if (isOutcome(prepared)) return prepared;
    const { message, fingerprint } = prepared;
    if (message.redelivered !== true) return runAttempt(message, fingerprint, false, options);
    // A redelivery: its attempt is counted before it runs (see unfinished-attempts.ts).
    return runRedelivered(general, store, suspects, message, (countedAhead) => runAttempt(message, fingerprint, countedAhead, options), options?.signal);
  }

  /** One attempt: the inbox transaction around the handler, then its outcome. */
  async function runAttempt(
    message: InboxMessage<TPayload>,
    fingerprint: string | null,
    countedAhead: boolean,
    options: ProcessOptions | undefined,
  ): Promise<InboxOutcome> {
    const attempt = message.attempt ?? 1;
    const row = { messageId: message.id, fingerprint, source: message.source, receivedAt: message.receivedAt };
    const result = await runInboxTransaction(resolved, store, {
      rows: [row],
      lockTimeoutMs: resolved.lockTimeoutMs,
      body: async (tx, claimed, handlerScope): Promise<InboxOutcome> => {
        if (!claimed.has(message.id)) {
          const existing = (await store.find(tx, [message.id])).get(message.id);
          // Gone between the conflict and the read: only retention could do that. Run the transaction again.
          if (existing === undefined) throw new ClaimRaceError(message.id);
          return outcomeOfExisting(general, message, fingerprint, existing);
        }
        const returned = await runHandler(handlerScope, resolved.handlerTimeoutMs, options?.signal, consumer, (handlerTx, signal) =>
          handler(handlerCopy(message), handlerTx, { consumer, attempt, signal } satisfies HandlerContext),
        );
        const completion = completionOf(returned);
        if (completion.status === 'rejected') {
          await store.markRejected(tx, message.id, completion.reason);
          return { status: 'rejected', messageId: message.id, consumer, reason: completion.reason, attempt };
        }
        if (completion.result !== null) {
          await store.markResult(tx, message.id, completion.result);
          return { status: 'processed', messageId: message.id, consumer, attempt, result: parseStoredResult(completion.result) };
        }
        return { status: 'processed', messageId: message.id, consumer, attempt };
      },
    });
    return result.ok ? result.value : outcomeOfFailure(general, store, message, result.failure, countedAhead);
  }

  const processor = (delivery: InboxMessage, options?: ProcessOptions): Promise<InboxOutcome> =>
    process(delivery, options).catch((error: unknown) => internalFailure(general, delivery, error));
  const checkTables = () => checkInboxTables(resolved.db, resolved.tables, consumer);
  const recordDeadLetter: DeadLetterRecorder = (outcome, place) => recordDeadLetterRow(resolved.db, resolved.tables, outcome, place);
  return Object.assign(processor, { kind: 'single' as const, consumer, checkTables, observe: () => {}, recordDeadLetter, maxAttempts: resolved.maxAttempts });
}
