import { sleep } from './backoff.js';
import { classifyDatabaseError } from './database-errors.js';
import { ClaimFailure } from './failure.js';
import type { ClaimRow, InboxStore } from './inbox-store.js';
import type { ResolvedOptions } from './options.js';
import type { AnyPgDatabase, TransactionOf } from './types.js';

type IsolationLevel = NonNullable<ResolvedOptions<AnyPgDatabase, unknown>['isolationLevel']>;

/** The body of a claim transaction: runs after the claim, in the same transaction. */
export type ClaimedBody<TDb extends AnyPgDatabase, T> = (tx: TransactionOf<TDb>, claimed: Set<string>) => Promise<T>;

interface PgPoolClient {
  query(text: string): Promise<unknown>;
  escapeLiteral(value: string): string;
  on(event: 'error', listener: (error: unknown) => void): unknown;
  removeListener(event: 'error', listener: (error: unknown) => void): unknown;
  release(destroy?: unknown): void;
}

interface NodePgTarget {
  pool: { connect(): Promise<PgPoolClient> };
  session: { dialect: unknown; schema: unknown; options: unknown };
}

/** A node-postgres `Pool` behind a Drizzle database, duck-typed so core loads no driver it does not need. */
function nodePostgresTarget(db: unknown): NodePgTarget | undefined {
  const { $client: pool, session } = db as { $client?: { connect?: unknown; totalCount?: unknown }; session?: Record<string, unknown> };
  if (typeof pool?.connect !== 'function' || typeof pool.totalCount !== 'number') return undefined;
  if (session === undefined || !('dialect' in session) || !('options' in session)) return undefined;
  return { pool: pool as NodePgTarget['pool'], session: session as NodePgTarget['session'] };
}

let nodePgModule: Promise<typeof import('drizzle-orm/node-postgres')> | undefined;

/** Last result's rows of a (possibly multi-statement) node-postgres query. */
function lastRows<T>(result: unknown): T[] {
  const last = Array.isArray(result) ? result[result.length - 1] : result;
  return (last as { rows: T[] }).rows;
}

/**
 * The node-postgres path: we check out the client and run BEGIN, lock_timeout and the claim as one
 * simple-protocol query, so the inbox adds no round trip to a bare transaction (BEGIN+claim,
 * handler, COMMIT vs BEGIN, handler, COMMIT). Owning the client also fixes two ways a dropped
 * connection hurt Drizzle's pool transaction:
 * - it sends BEGIN before its try/finally, so a BEGIN failing on a dead connection leaks the client;
 *   a few such leaks wedge the pool for good;
 * - node-postgres emits `error` on a checked-out client whose connection drops between queries, and
 *   pg-pool removes its listener during checkout: unhandled, it kills the process. The error is not
 *   lost: the pending query or COMMIT fails with it and that becomes the outcome.
 * A broken client is released with its error so the pool destroys it instead of reusing it.
 */
async function nodePostgresClaim<TDb extends AnyPgDatabase, T>(
  target: NodePgTarget,
  options: ResolvedOptions<TDb, unknown>,
  store: InboxStore,
  rows: readonly ClaimRow[],
  body: ClaimedBody<TDb, T>,
): Promise<T> {
  const { NodePgSession, NodePgTransaction } = await (nodePgModule ??= import('drizzle-orm/node-postgres'));
  const client = await target.pool.connect();
  const ignore = () => {};
  client.on('error', ignore);
  let failure: unknown;
  try {
    const begin = options.isolationLevel === undefined ? 'begin' : `begin isolation level ${options.isolationLevel}`;
    let claimed: Set<string>;
    try {
      const result = await client.query(`${begin}; ${store.claimText(rows, (v) => client.escapeLiteral(v), options.lockTimeoutMs)}`);
      claimed = new Set(lastRows<{ message_id: string }>(result).map((r) => r.message_id));
    } catch (error) {
      await client.query('rollback').catch(() => {});
      throw new ClaimFailure(error);
    }
    const { session } = target;
    const clientSession = new NodePgSession(client as never, session.dialect as never, session.schema as never, session.options as never);
    const tx = new NodePgTransaction(session.dialect as never, clientSession, session.schema as never);
    let result: T;
    try {
      result = await body(tx as TransactionOf<TDb>, claimed);
    } catch (error) {
      await client.query('rollback').catch(() => {}); // a dead connection rolls back on the server anyway
      throw error;
    }
    await client.query('commit');
    return result;
  } catch (error) {
    failure = error;
    throw error;
  } finally {
    client.removeListener('error', ignore);
    const cause = failure instanceof ClaimFailure ? failure.original : failure;
    client.release(cause !== undefined && classifyDatabaseError(cause) === 'unavailable' ? cause : undefined);
  }
}

/** Every other driver: Drizzle's own transaction, with the claim as its first statement. */
async function drizzleClaim<TDb extends AnyPgDatabase, T>(
  options: ResolvedOptions<TDb, unknown>,
  store: InboxStore,
  rows: readonly ClaimRow[],
  body: ClaimedBody<TDb, T>,
): Promise<T> {
  const config = options.isolationLevel === undefined ? undefined : { isolationLevel: options.isolationLevel as IsolationLevel };
  return (await options.db.transaction((async (tx: TransactionOf<TDb>) => {
    let claimed: Set<string>;
    try {
      claimed = await store.claim(tx, rows);
    } catch (error) {
      throw new ClaimFailure(error);
    }
    return body(tx, claimed);
  }) as never, config)) as T;
}

/**
 * @internal One inbox transaction: claim `rows`, then run `body` with the claimed ids, then commit.
 * Re-runs the whole transaction when PostgreSQL reports a serialization failure or deadlock (safe:
 * the failed run was rolled back whole). A failing claim is thrown as a {@link ClaimFailure};
 * everything else as it was thrown.
 */
export async function claimTransaction<TDb extends AnyPgDatabase, T>(
  options: ResolvedOptions<TDb, unknown>,
  store: InboxStore,
  rows: readonly ClaimRow[],
  body: ClaimedBody<TDb, T>,
): Promise<T> {
  const target = nodePostgresTarget(options.db);
  for (let run = 0; ; run++) {
    try {
      return target !== undefined
        ? await nodePostgresClaim(target, options, store, rows, body)
        : await drizzleClaim(options, store, rows, body);
    } catch (error) {
      const cause = error instanceof ClaimFailure ? error.original : error;
      if (run >= options.transactionRetries || classifyDatabaseError(cause) !== 'transient-conflict') throw error;
      // Short, jittered and growing: the competing transaction usually finishes within milliseconds.
      await sleep(Math.random() * 10 * 2 ** run);
    }
  }
}
