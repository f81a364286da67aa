import { sleep } from './backoff.js';
import { classifyDatabaseError } from './database-errors.js';
import type { ResolvedOptions } from './options.js';
import type { AnyPgDatabase, TransactionOf } from './types.js';

interface EventfulClient {
  on(event: 'error', listener: (error: unknown) => void): unknown;
  removeListener(event: 'error', listener: (error: unknown) => void): unknown;
  release(): unknown;
}

/**
 * node-postgres emits `error` on a checked-out pool client whose connection drops between two
 * queries, and pg-pool removes its own listener while the client is checked out: with no listener
 * the process dies. The failure still reaches us through the failing query or COMMIT (so nothing is
 * swallowed); this only keeps one lost connection from crashing the consumer.
 */
function guardCheckedOutClient(tx: unknown): (() => void) | undefined {
  const client = (tx as { session?: { client?: Partial<EventfulClient> } }).session?.client;
  if (typeof client?.on !== 'function' || typeof client.release !== 'function' || typeof client.removeListener !== 'function') return undefined;
  const ignore = () => {};
  client.on('error', ignore);
  return () => client.removeListener!('error', ignore);
}

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
    let unguard: (() => void) | undefined;
    try {
      return (await options.db.transaction((tx: unknown) => {
        unguard = guardCheckedOutClient(tx);
        return body(tx as TransactionOf<TDb>);
      }, config)) as T;
    } catch (error) {
      if (run >= options.transactionRetries || classifyDatabaseError(error) !== 'transient-conflict') throw error;
      // Short, jittered and growing: the competing transaction usually finishes within milliseconds.
      await sleep(Math.random() * 10 * 2 ** run);
    } finally {
      unguard?.();
    }
  }
}
