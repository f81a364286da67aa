import { classifyDatabaseError } from '../database-errors.js';
import { type Claimed, checkTargets, type InboxStore } from '../inbox-store.js';
import type { ResolvedOptions } from '../options.js';
import { recordClaimOf } from '../telemetry/instruments.js';
import { bodyFailure, brokenConnectionFailure, claimFailure, completionFailure, type TransactionFailure } from '../transaction-failures.js';
import type { HandlerScope, TransactionPlan, TransactionResult } from '../transaction.js';
import type { AnyPgDatabase, TransactionOf } from '../types.js';
import { guardedHandlerTransaction } from './handler-transaction.js';
import { postgresJsClient } from './postgres-js.js';

/** Carries a failure of one of the inbox's own steps out of Drizzle's transaction callback. */
class StepFailure extends Error {
  constructor(
    readonly step: 'claim' | 'verify',
    readonly original: unknown,
  ) {
    super(`inbox ${step} failed`, { cause: original });
  }
}

/**
 * @internal Every driver but node-postgres (postgres-js, PGlite): Drizzle's own transaction, with
 * the claim as its first statements and the completion check as its last. How the transaction ended
 * is read from where it failed:
 * - before the claim answered: BEGIN or the connection failed, so an outage;
 * - in the body: when the rejection is the very error the body threw, ROLLBACK went through and the
 *   connection is fine, so it is the handler's failure; anything else came from ROLLBACK (a dead
 *   connection) or from the driver's record of an earlier failed statement (postgres-js rethrows the
 *   first error of the transaction);
 * - after the check passed: COMMIT failed.
 */
export async function drizzleTransaction<TDb extends AnyPgDatabase, T>(
  options: ResolvedOptions<TDb, unknown>,
  store: InboxStore,
  plan: TransactionPlan<TDb, T>,
  readWrite = false,
): Promise<TransactionResult<T>> {
  // READ WRITE costs Drizzle a statement of its own (SET TRANSACTION), so it is said only when asked.
  const config =
    options.isolationLevel === undefined && !readWrite
      ? undefined
      : {
          ...(options.isolationLevel === undefined ? {} : { isolationLevel: options.isolationLevel }),
          ...(readWrite ? { accessMode: 'read write' as const } : {}),
        };
  // Written inside the callback: declared with `as` so TypeScript does not narrow them to their initial values.
  let step = 'begin' as 'begin' | 'claim' | 'body' | 'verify' | 'commit';
  let thrownByBody = undefined as { error: unknown } | undefined;
  // postgres-js only: the transaction's id, read by the completion check, to ask after COMMIT whether it committed.
  const reportXid = postgresJsClient(options.db) !== undefined;
  let xid: string | null = null;
  try {
    const value = (await options.db.transaction(
      (async (tx: TransactionOf<TDb>) => {
        step = 'claim';
        let claimed: Claimed;
        const claimSentAt = performance.now();
        try {
          claimed = await store.claim(tx, plan.rows, plan.lockTimeoutMs);
          recordClaimOf(options.consumer, claimSentAt, plan.rows.length, { claimed: claimed.ids.size });
        } catch (error) {
          recordClaimOf(options.consumer, claimSentAt, plan.rows.length, { error });
          throw new StepFailure('claim', error);
        }
        step = 'body';
        let result: T;
        // The handler gets a transaction that refuses statements once it settles, or once a hung
        // handler is abandoned; inboxed's own statements go through Drizzle's. On a driver whose
        // client is not known, the handler gets Drizzle's and is never abandoned.
        const guarded = guardedHandlerTransaction(tx);
        const handler: HandlerScope<TDb> = guarded === undefined ? { tx, end: async () => {}, refusal: () => undefined } : guarded;
        try {
          result = await plan.body(tx, claimed.ids, handler);
        } catch (error) {
          thrownByBody = { error };
          throw error;
        } finally {
          // Already ended by the body, unless it failed before the handler ran.
          await handler.end();
        }
        const { ids, tids } = checkTargets(claimed, plan.verifyIds);
        if (ids.length > 0) {
          step = 'verify';
          try {
            xid = await store.verify(tx, ids, tids, reportXid);
          } catch (error) {
            throw new StepFailure('verify', error);
          }
        }
        step = 'commit';
        return result;
      }) as never,
      config as never,
    )) as T;
    if (xid !== null) {
      const lost = await rolledBackAfterCheck(options.db, store, xid);
      if (lost !== undefined) return { ok: false, failure: lost };
    }
    return { ok: true, value };
  } catch (error) {
    if (error instanceof StepFailure) {
      return { ok: false, failure: error.step === 'claim' ? claimFailure(error.original) : completionFailure(error.original) };
    }
    switch (step) {
      case 'begin':
      case 'claim':
        return { ok: false, failure: claimFailure(error) };
      case 'body':
        if (thrownByBody !== undefined && error === thrownByBody.error) return { ok: false, failure: bodyFailure(error) };
        return {
          ok: false,
          failure: classifyDatabaseError(error) === 'unavailable' ? brokenConnectionFailure(thrownByBody?.error, error) : bodyFailure(error),
        };
      default:
        // A check failure replaced by a failed ROLLBACK, or COMMIT itself failing.
        return { ok: false, failure: completionFailure(error) };
    }
  }
}

/**
 * postgres-js resolves its transaction when COMMIT answers, even when the answer is ROLLBACK: a
 * statement that failed after the completion check aborts the transaction, and postgres-js does not
 * read COMMIT's tag. The handler's `tx` refuses statements once the handler returns (see
 * `handler-transaction.ts`), so none of its statements should get there; this is the backstop
 * for any path that does (a statement sent on the transaction's connection some other way). So on
 * postgres-js the completion check also reads the transaction's id, and after COMMIT the server's
 * commit log is asked whether that transaction committed. When it rolled back, the attempt is a
 * counted `aborted` failure, never `processed`. (Reading the claimed rows back instead would be
 * fooled by a concurrent copy that committed the same ids after our COMMIT rolled back: its effect,
 * our label and our stored result.) node-postgres's path reads the tag itself; PGlite reports the
 * ROLLBACK as an error. If the database cannot be asked, the outcome is an outage retry: a
 * redelivery finds out which it was.
 */
async function rolledBackAfterCheck(db: AnyPgDatabase, store: InboxStore, xid: string): Promise<TransactionFailure | undefined> {
  let committed: boolean;
  try {
    committed = await store.committed(db, xid);
  } catch (error) {
    return { kind: 'outage', error };
  }
  if (committed) return undefined;
  return {
    kind: 'aborted',
    error: new Error(
      `COMMIT did not commit: transaction ${xid} rolled back after the completion check passed (a statement sent after the handler returned failed?)`,
    ),
    firstFailure: undefined,
  };
}
