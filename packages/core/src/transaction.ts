import { sleep } from './backoff.js';
import { classifyDatabaseError } from './database-errors.js';
import type { ResolvedOptions } from './options.js';
import type { AnyPgDatabase, TransactionOf } from './types.js';

/**
 * @internal Runs `body` in one transaction of the user's database, re-running it when PostgreSQL
 * reports a serialization failure or deadlock (safe: the failed run was rolled back whole).
 * Everything else is thrown to the caller.
 */
export async function inTransaction<TDb extends AnyPgDatabase, T>(
  options: ResolvedOptions<TDb, unknown>,
  body: (tx: TransactionOf<TDb>) => Promise<T>,
): Promise<T> {
  const config = options.isolationLevel === undefined ? undefined : { isolationLevel: options.isolationLevel };
  for (let run = 0; ; run++) {
    try {
      return await options.db.transaction(body as (tx: unknown) => Promise<T>, config) as T;
    } catch (error) {
      if (run >= options.transactionRetries || classifyDatabaseError(error) !== 'transient-conflict') throw error;
      // Short, jittered and growing: the competing transaction usually finishes within milliseconds.
      await sleep(Math.random() * 10 * 2 ** run);
    }
  }
}
