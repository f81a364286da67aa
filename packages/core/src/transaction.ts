import { sql } from 'drizzle-orm';
import { rowsOf } from './admin/admin-sql.js';
import { sleep } from './backoff.js';
import { drizzleTransaction } from './drivers/drizzle.js';
import { nodePostgresTarget, nodePostgresTransaction } from './drivers/node-postgres.js';
import { isReadOnlyRefusal } from './database-errors.js';
import { describeError } from './error-text.js';
import type { ClaimRow, InboxStore } from './inbox-store.js';
import type { ResolvedOptions } from './options.js';
import { Attr, recordTransaction } from './telemetry/instruments.js';
import { startInternalSpan } from './telemetry/spans.js';
import type { TransactionFailure } from './transaction-failures.js';
import type { AnyPgDatabase, TransactionOf } from './types.js';

/** @internal What one inbox transaction does. */
export interface TransactionPlan<TDb extends AnyPgDatabase, T> {
  /** The rows to claim, in a stable order (sorted by id for batches, so claims cannot deadlock). */
  rows: readonly ClaimRow[];
  /** `lock_timeout` of the claim only; `null` keeps the session's. */
  lockTimeoutMs: number | null;
  /**
   * Ids whose rows the completion check must find although this transaction claimed nothing (the
   * leased completion: the claim committed earlier, the body updates the row under its fence).
   */
  verifyIds?: readonly string[];
  /**
   * Runs after the claim, in the same transaction, with the ids this transaction claimed. It may
   * throw: what the handler throws is the handler's failure. The transaction then checks that every
   * claimed row is still there, in a transaction still open, and commits. inboxed's own statements
   * go through `tx`; the handler's code gets `handler.tx` and must end it (`runHandler`) as soon as
   * it settles.
   */
  body: (tx: TransactionOf<TDb>, claimed: Set<string>, handler: HandlerScope<TDb>) => Promise<T>;
  /**
   * `probe`: a claim made only to wait for a copy that holds it; the body throws
   * {@link RollbackOnPurpose}, so it never commits (telemetry says `probe`, `rolled-back`; or the
   * failure kind, `busy` or `outage`, when the claim could not be waited out).
   */
  operation?: 'probe';
}

/** @internal Thrown by a probe's body to roll its transaction back once the claim answered. */
export class RollbackOnPurpose extends Error {}

/**
 * @internal The handler's side of an inbox transaction: the same transaction, through a client that
 * refuses statements once ended. A statement the handler left running (an un-awaited query, a
 * timer) would otherwise reach the transaction after inboxed recorded the outcome, or after COMMIT
 * (on the next delivery's transaction, when the connection serves it by then).
 */
export interface HandlerScope<TDb extends AnyPgDatabase> {
  tx: TransactionOf<TDb>;
  /** Refuses every later statement of the handler's (after the savepoints it left open settle). */
  end(): Promise<void>;
  /**
   * The handler's refused attempt to end the transaction itself (a raw `COMMIT`, `ROLLBACK`), if
   * any: it fails the attempt even if the handler caught it.
   */
  refusal(): unknown;
  /**
   * When the driver offers it: gives up on a hung handler, so its later statements fail and the
   * transaction can end without it (see `runWithDeadline`). Resolves once that holds.
   */
  abandon?: () => void | Promise<void>;
}

/** @internal The committed value, or why nothing committed. Never a thrown error. */
export type TransactionResult<T> = { ok: true; value: T } | { ok: false; failure: TransactionFailure };

/** True when the claim was refused as read-only (25006): see {@link leftReadOnlyByAHandler}. */
function refusedAsReadOnly(result: TransactionResult<unknown>): boolean {
  return !result.ok && result.failure.kind === 'outage' && isReadOnlyRefusal(result.failure.error);
}

/**
 * After a claim refused as read-only: true when neither the database nor the role is read-only by
 * default, so an earlier handler left its session read-only (`SET SESSION CHARACTERISTICS AS
 * TRANSACTION READ ONLY`) and the claim is worth one more try, saying READ WRITE. A database a DBA
 * froze (`default_transaction_read_only` on for the database or role) is respected: the refusal
 * stays the outage it is, as on a standby (where READ WRITE is refused too).
 */
async function leftReadOnlyByAHandler(db: AnyPgDatabase): Promise<boolean> {
  try {
    const rows = await rowsOf<{ frozen: boolean }>(db, sql`select reset_val = 'on' as frozen from pg_settings where name = 'default_transaction_read_only'`);
    return rows[0]?.frozen === false;
  } catch {
    return false;
  }
}

/**
 * @internal One inbox transaction: claim, body, completion check, commit. Re-runs the whole
 * transaction when PostgreSQL reports a serialization failure or deadlock (safe: the failed run was
 * rolled back whole), up to `transactionRetries` times. With OpenTelemetry: one `inboxed transaction`
 * span over all runs (a child of the active delivery span), `inboxed.transaction.duration` and
 * `inboxed.transaction.conflicts`.
 */
export async function runInboxTransaction<TDb extends AnyPgDatabase, T>(
  options: ResolvedOptions<TDb, unknown>,
  store: InboxStore,
  plan: TransactionPlan<TDb, T>,
): Promise<TransactionResult<T>> {
  // `complete`: leased mode's fenced completion (its claim committed earlier); `process`: claim, handler, commit.
  const operation = plan.operation ?? (plan.rows.length === 0 && plan.verifyIds !== undefined ? 'complete' : 'process');
  const ids = plan.rows.length > 0 ? plan.rows.map((row) => row.messageId) : (plan.verifyIds ?? []);
  const span = startInternalSpan(
    'inboxed transaction',
    { [Attr.CONSUMER]: options.consumer, [Attr.TRANSACTION_OPERATION]: operation, [Attr.BATCH_COUNT]: ids.length },
    ids,
  );
  const started = performance.now();
  let runs = 0;
  let conflicts = 0;
  const attempt = async (): Promise<TransactionResult<T>> => {
    const target = nodePostgresTarget(options.db);
    await store.pinSchema(options.db);
    const once = (readWrite: boolean) =>
      target !== undefined ? nodePostgresTransaction(target, options, store, plan, readWrite) : drizzleTransaction(options, store, plan, readWrite);
    for (let run = 0; ; run++) {
      runs = run + 1;
      let result = await once(false);
      // Only a refused claim pays for the look at pg_settings; a committed transaction pays nothing.
      if (refusedAsReadOnly(result) && (await leftReadOnlyByAHandler(options.db))) result = await once(true);
      if (!result.ok && result.failure.kind === 'conflict') conflicts++;
      if (result.ok || result.failure.kind !== 'conflict' || run >= options.transactionRetries) return result;
      // Short, jittered and growing: the competing transaction usually finishes within milliseconds.
      await sleep(Math.random() * 10 * 2 ** run);
    }
  };
  let result: TransactionResult<T> | undefined;
  try {
    result = span === undefined ? await attempt() : await span.run(attempt);
    return result;
  } finally {
    const ended =
      result === undefined ? 'error' : result.ok ? 'committed' : result.failure.error instanceof RollbackOnPurpose ? 'rolled-back' : result.failure.kind;
    recordTransaction(options.consumer, operation, (performance.now() - started) / 1000, ended, conflicts);
    span?.end(
      { [Attr.TRANSACTION_RESULT]: ended, [Attr.TRANSACTION_RUNS]: runs },
      result?.ok === true || ended === 'rolled-back'
        ? undefined
        : { type: ended, message: result === undefined ? 'the transaction threw' : describeError(result.failure.error) },
    );
  }
}
