import type { InboxError } from '../errors.js';
import { type Claimed, checkTargets, claimedOf, type InboxStore } from '../inbox-store.js';
import type { ResolvedOptions } from '../options.js';
import { recordClaimOf } from '../telemetry/instruments.js';
import { bodyFailure, brokenConnectionFailure, claimFailure, completionFailure, type TransactionFailure } from '../transaction-failures.js';
import type { AnyPgDatabase, TransactionOf } from '../types.js';
import type { HandlerScope, TransactionPlan, TransactionResult } from '../transaction.js';
import { cancelRunningStatement } from './cancel-request.js';
import { StatementGate, streamRefused } from './transaction-control.js';

interface PgPoolClient {
  query(text: string): Promise<unknown>;
  escapeLiteral(value: string): string;
  on(event: 'error', listener: (error: unknown) => void): unknown;
  removeListener(event: 'error', listener: (error: unknown) => void): unknown;
  release(destroy?: unknown): void;
}

/** @internal A node-postgres `Pool` behind a Drizzle database. */
export interface NodePgTarget {
  pool: { connect(): Promise<PgPoolClient> };
  session: { dialect: unknown; schema: unknown; options: unknown };
}

/** @internal The node-postgres `Pool` behind a Drizzle database, duck-typed so core loads no driver it does not need. */
export function nodePostgresTarget(db: unknown): NodePgTarget | undefined {
  const { $client: pool, session } = db as { $client?: { connect?: unknown; totalCount?: unknown }; session?: Record<string, unknown> };
  if (typeof pool?.connect !== 'function' || typeof pool.totalCount !== 'number') return undefined;
  if (session === undefined || !('dialect' in session) || !('options' in session)) return undefined;
  return { pool: pool as NodePgTarget['pool'], session: session as NodePgTarget['session'] };
}

/**
 * @internal True for a Drizzle database over one node-postgres `Client` (or a checked-out
 * `PoolClient`) rather than a `Pool`. One connection holds one transaction at a time: concurrent
 * deliveries would run inside each other's transaction, and one's ROLLBACK would discard another's
 * effect already reported `processed`. A single client also never reconnects.
 */
export function isSingleNodePgClient(db: unknown): boolean {
  const client = (db as { $client?: { escapeLiteral?: unknown; query?: unknown; totalCount?: unknown } } | null)?.$client;
  return (
    typeof client === 'object' &&
    client !== null &&
    typeof client.escapeLiteral === 'function' &&
    typeof client.query === 'function' &&
    typeof client.totalCount !== 'number'
  );
}

let nodePgModule: Promise<typeof import('drizzle-orm/node-postgres')> | undefined;

/** drizzle-orm/node-postgres, loaded on first use only: core imports no driver it does not need. */
function loadNodePg(): Promise<typeof import('drizzle-orm/node-postgres')> {
  nodePgModule ??= import('drizzle-orm/node-postgres');
  return nodePgModule;
}

/** A quote or a backslash: the only characters that make a literal need escaping. */
const NEEDS_ESCAPING = /['\\]/;

/**
 * A SQL string literal of `value`. Ids and sources rarely hold a quote or a backslash, and without
 * them `'value'` is exact whatever `standard_conforming_strings` says; anything else goes through
 * the driver's own `escapeLiteral`, which builds its result a character at a time (a hundred ids per
 * batch made that a visible share of the batch's CPU).
 */
export function quoteLiteral(client: Pick<PgPoolClient, 'escapeLiteral'>, value: string): string {
  return NEEDS_ESCAPING.test(value) ? client.escapeLiteral(value) : `'${value}'`;
}

/** Result sets of a (possibly multi-statement) simple query. */
function resultsOf(result: unknown): { command?: string; rows: unknown[] }[] {
  return (Array.isArray(result) ? result : [result]) as { command?: string; rows: unknown[] }[];
}

/** ROLLBACK, reporting instead of throwing when it fails (the connection is then unusable). */
async function rollback(client: PgPoolClient): Promise<unknown> {
  try {
    await client.query('rollback');
    return undefined;
  } catch (error) {
    return error;
  }
}

/**
 * What broke the connection: the driver's `error` event when there was one (it carries the server's
 * reason, e.g. SQLSTATE 25P03 for an idle-in-transaction timeout), else the failed ROLLBACK.
 */
function firstOf(rollbackError: unknown, connectionProblem: unknown): unknown {
  return connectionProblem ?? rollbackError;
}

/**
 * The client the handler's Drizzle transaction talks through: the same connection, but it remembers
 * the first statement that failed, so a handler that swallowed that failure is told which one it was,
 * and it refuses statements once closed. Drizzle's session calls nothing but `query` on it. A class
 * of its own rather than `Object.create(client)`: that would make each pooled client a prototype
 * with a map of its own, and every property read in node-postgres's client code would go
 * megamorphic, for every user of the pool.
 */
class ObservedClient {
  // True private fields, not TypeScript's `private`: the handler reaches this object as
  // `tx.session.client`, and a plain property would hand it the raw pooled connection (whose
  // statements pass no guard and still run after inboxed's COMMIT) or the gate's switch.
  readonly #gate = new StatementGate();
  readonly #client: PgPoolClient;
  readonly #onFailure: (error: unknown) => void;

  constructor(client: PgPoolClient, onFailure: (error: unknown) => void) {
    this.#client = client;
    this.#onFailure = onFailure;
  }

  query(...args: unknown[]): unknown {
    const refused = this.#gate.check(args[0]);
    if (refused !== undefined) return refuseStatement(args, refused);
    const config = args[0] as { submit?: unknown; handleError?: unknown } | null | undefined;
    if (typeof config?.submit === 'function') return refuseSubmittable(config);
    const client = this.#client;
    const result = (client.query as (...a: unknown[]) => unknown).apply(client, args);
    if (typeof (result as Promise<unknown> | undefined)?.then === 'function') (result as Promise<unknown>).then(undefined, this.#onFailure);
    return result;
  }

  /** The first statement refused for ending the transaction, if any. */
  refusal(): InboxError | undefined {
    return this.#gate.refusal;
  }

  close(): void {
    this.#gate.closed = true;
  }
}

/**
 * A cursor or stream (a `Submittable`) refused, answered the way node-postgres answers a submittable
 * it cannot run: the object itself is returned, and its `handleError` is called on the next tick.
 */
function refuseSubmittable(submittable: { handleError?: unknown }): unknown {
  const error = streamRefused('a cursor or stream (a Submittable)');
  if (typeof submittable.handleError !== 'function') return Promise.reject(error);
  process.nextTick(() => (submittable.handleError as (error: Error) => void).call(submittable, error));
  return submittable;
}

/** A refused statement, answered the way node-postgres answers: through the callback when given one. */
function refuseStatement(args: unknown[], error: InboxError): Promise<never> | undefined {
  const callback = args[args.length - 1];
  if (typeof callback === 'function') {
    queueMicrotask(() => (callback as (error: Error) => void)(error));
    return undefined;
  }
  return Promise.reject(error);
}

/**
 * @internal The node-postgres path: we check out the client and send BEGIN, the bounded claim and
 * the wait's undo as one simple-protocol query, and the completion check with COMMIT as another, so
 * the inbox adds no round trip to a bare transaction (BEGIN+claim, handler, check+COMMIT vs BEGIN,
 * handler, COMMIT). Owning the client also fixes two ways a dropped connection hurt Drizzle's pool
 * transaction:
 * - it sends BEGIN before its try/finally, so a BEGIN failing on a dead connection leaks the client;
 *   a few such leaks wedge the pool for good;
 * - node-postgres emits `error` on a checked-out client whose connection drops between queries, and
 *   pg-pool removes its listener during checkout: unhandled, it kills the process. The error is not
 *   lost: it marks the connection broken, and the pending query or COMMIT fails with it.
 * A client that broke, or whose transaction the handler ended itself, is released with an error so
 * the pool destroys it instead of handing its session state to the next message.
 */
export async function nodePostgresTransaction<TDb extends AnyPgDatabase, T>(
  target: NodePgTarget,
  options: ResolvedOptions<TDb, unknown>,
  store: InboxStore,
  plan: TransactionPlan<TDb, T>,
  readWrite = false,
): Promise<TransactionResult<T>> {
  const { NodePgSession, NodePgTransaction } = await loadNodePg();
  let client: PgPoolClient;
  try {
    client = await target.pool.connect();
  } catch (error) {
    return { ok: false, failure: { kind: 'outage', error } };
  }
  let connectionProblem: unknown;
  const onError = (error: unknown) => {
    connectionProblem ??= error;
  };
  client.on('error', onError);
  let failure: TransactionFailure | undefined;
  let abandoned = false;
  // From BEGIN until COMMIT or ROLLBACK completes. A client released while it is true (an unexpected
  // throw between the two) is destroyed: handed back as it is, its open transaction would take in
  // the next delivery's statements and commit this one's claim with them.
  let open = false;
  const rollbackOpen = async (): Promise<unknown> => {
    const error = await rollback(client);
    if (error === undefined) open = false;
    return error;
  };
  try {
    const quote = (value: string) => quoteLiteral(client, value);
    const mode = [options.isolationLevel === undefined ? '' : ` isolation level ${options.isolationLevel}`, readWrite ? ' read write' : ''].join('');
    const begin = `begin${mode}`;
    const claim = store.claimText(plan.rows, quote, plan.lockTimeoutMs);
    let claimed: Claimed;
    const claimSentAt = performance.now();
    try {
      open = true;
      const results = resultsOf(await client.query(`${begin}; ${claim}`));
      claimed = claimedOf(results[1]!.rows as { message_id: string; tid: unknown }[]);
      recordClaimOf(options.consumer, claimSentAt, plan.rows.length, { claimed: claimed.ids.size });
    } catch (error) {
      recordClaimOf(options.consumer, claimSentAt, plan.rows.length, { error });
      const problem = firstOf(await rollbackOpen(), connectionProblem);
      failure = problem !== undefined ? { kind: 'outage', error } : claimFailure(error);
      return { ok: false, failure };
    }

    let firstFailure: unknown;
    const { session } = target;
    const handlerClient = new ObservedClient(client, (error) => {
      firstFailure ??= error;
    });
    const transactionOver = (queries: unknown) =>
      new NodePgTransaction(
        session.dialect as never,
        new NodePgSession(queries as never, session.dialect as never, session.schema as never, session.options as never),
        session.schema as never,
      );
    // inboxed's own statements go straight to the client; the handler's through the observed one.
    const tx = transactionOver(client) as TransactionOf<TDb>;
    const handler: HandlerScope<TDb> = {
      tx: transactionOver(handlerClient) as TransactionOf<TDb>,
      end: async () => handlerClient.close(),
      refusal: () => handlerClient.refusal(),
      // A handler past its deadline that ignores its signal: cut the connection under it, so its
      // later statements fail instead of running on a connection the pool hands to someone else.
      // Cutting it does not stop a statement the server is running for the handler (a lock wait, a
      // long query): the backend finds its client gone only when the statement ends, and until then
      // it holds the claim, so a redelivery would wait on it. So that statement is cancelled too.
      // The connection is never reused, so the cancel cannot reach another delivery's statement.
      abandon: () => {
        abandoned = true;
        handlerClient.close();
        void cancelRunningStatement(client);
        client.release(new Error('handler abandoned after handlerTimeoutMs'));
      },
    };
    let value: T;
    try {
      value = await plan.body(tx, claimed.ids, handler);
      handlerClient.close();
    } catch (error) {
      handlerClient.close();
      if (abandoned) {
        failure = bodyFailure(error);
        return { ok: false, failure };
      }
      // A dead connection rolls back on the server anyway; a failed ROLLBACK tells us it is dead.
      const problem = firstOf(await rollbackOpen(), connectionProblem);
      failure = bodyFailure(error, problem);
      return { ok: false, failure };
    }

    try {
      const { ids, tids } = checkTargets(claimed, plan.verifyIds);
      const text = ids.length === 0 ? 'commit' : `${store.verifyText(ids, tids, quote)}; commit`;
      const results = resultsOf(await client.query(text));
      open = false;
      // PostgreSQL answers COMMIT in an aborted transaction with the tag ROLLBACK and no error.
      if (results[results.length - 1]?.command === 'ROLLBACK') {
        failure = { kind: 'aborted', error: new Error('COMMIT was answered with ROLLBACK'), firstFailure };
        return { ok: false, failure };
      }
    } catch (error) {
      const problem = firstOf(await rollbackOpen(), connectionProblem);
      failure = problem !== undefined ? brokenConnectionFailure(error, problem, false) : completionFailure(error, firstFailure);
      return { ok: false, failure };
    }
    return { ok: true, value };
  } finally {
    client.removeListener('error', onError);
    if (!abandoned) {
      // An inbox statement refused on a connection that otherwise works (permission denied, a table
      // not found) may come from session state an earlier handler left on it (`SET ROLE`,
      // `SET search_path`): a fresh connection for the next attempt, rather than the same refusal
      // for ever.
      const discard =
        connectionProblem ??
        (failure?.kind === 'outage' || failure?.kind === 'ended' || failure?.kind === 'inbox-query' || failure?.kind === 'table-missing'
          ? (failure.error ?? new Error('discarded'))
          : undefined) ??
        (open ? new Error('released inside an open transaction') : undefined);
      client.release(discard);
    }
  }
}
