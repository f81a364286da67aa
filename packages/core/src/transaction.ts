import { sleep } from './backoff.js';
import { classifyDatabaseError } from './database-errors.js';
import type { ResolvedOptions } from './options.js';
import type { AnyPgDatabase, TransactionOf } from './types.js';

type TransactionConfig = { isolationLevel: NonNullable<ResolvedOptions<AnyPgDatabase, unknown>['isolationLevel']> } | undefined;
type Body<T> = (tx: unknown) => Promise<T>;

interface PoolClient {
  on(event: 'error', listener: (error: unknown) => void): unknown;
  removeListener(event: 'error', listener: (error: unknown) => void): unknown;
  release(destroy?: unknown): void;
}

interface DrizzleSession {
  constructor: new (client: PoolClient, dialect: unknown, schema: unknown, options: unknown) => { transaction<T>(body: Body<T>, config?: TransactionConfig): Promise<T> };
  dialect: unknown;
  schema: unknown;
  options: unknown;
}

/**
 * Finds a node-postgres `Pool` behind a Drizzle database, with the session that wraps it. Duck-typed
 * so core imports no driver.
 */
function nodePostgresPool(db: unknown): { pool: { connect(): Promise<PoolClient> }; session: DrizzleSession } | undefined {
  const { $client: pool, session } = db as { $client?: { connect?: unknown; totalCount?: unknown }; session?: Partial<DrizzleSession> };
  if (typeof pool?.connect !== 'function' || typeof pool.totalCount !== 'number') return undefined;
  if (session === undefined || typeof session.constructor !== 'function' || !('dialect' in session)) return undefined;
  return { pool: pool as { connect(): Promise<PoolClient> }, session: session as DrizzleSession };
}

/**
 * A transaction on a node-postgres pool, run on a client we check out ourselves. Two reasons, both
 * about surviving a database that drops connections:
 * - Drizzle's pool transaction sends BEGIN before its try/finally, so a BEGIN that fails on a dead
 *   connection leaks the client; a few such leaks wedge the pool for good.
 * - node-postgres emits `error` on a checked-out client whose connection drops between queries, and
 *   pg-pool removes its own listener during checkout: unhandled, it kills the process. The error is
 *   not lost: the pending query or COMMIT fails with it, and that failure becomes the outcome.
 * A broken client is released with its error, so the pool destroys it instead of reusing it.
 */
async function poolTransaction<T>(target: NonNullable<ReturnType<typeof nodePostgresPool>>, body: Body<T>, config: TransactionConfig): Promise<T> {
  const client = await target.pool.connect();
  const ignore = () => {};
  client.on('error', ignore);
  let failure: unknown;
  try {
    const { session } = target;
    const clientSession = new session.constructor(client, session.dialect, session.schema, session.options);
    return await clientSession.transaction(body, config);
  } catch (error) {
    failure = error;
    throw error;
  } finally {
    client.removeListener('error', ignore);
    client.release(failure !== undefined && classifyDatabaseError(failure) === 'unavailable' ? failure : undefined);
  }
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
  const config: TransactionConfig = options.isolationLevel === undefined ? undefined : { isolationLevel: options.isolationLevel };
  const pool = nodePostgresPool(options.db);
  for (let run = 0; ; run++) {
    try {
      return pool !== undefined
        ? await poolTransaction(pool, body as Body<T>, config)
        : ((await options.db.transaction(body as Body<T> as never, config)) as T);
    } catch (error) {
      if (run >= options.transactionRetries || classifyDatabaseError(error) !== 'transient-conflict') throw error;
      // Short, jittered and growing: the competing transaction usually finishes within milliseconds.
      await sleep(Math.random() * 10 * 2 ** run);
    }
  }
}
