import type { InboxError } from '../errors.js';
import { CANCEL_TIMEOUT_MS } from './cancel-request.js';
import { lateStatementRefused, StatementGate, streamRefused } from './transaction-control.js';

/**
 * @internal The handler's view of an inbox transaction on the drivers where inboxed uses Drizzle's
 * own transaction (postgres-js, PGlite), and the switch that ends it.
 *
 * Neither driver refuses a statement sent through a transaction's client after inboxed's completion
 * check, or after COMMIT:
 * - between the check and COMMIT, a raw ROLLBACK (or a failing statement) ends or aborts the
 *   transaction after the check passed: COMMIT then answers without an error, and the attempt
 *   would be `processed` with nothing committed;
 * - after COMMIT, on postgres-js the connection may already serve the next delivery, whose
 *   transaction would take the statement in (and commit or lose it with its own work), or sit idle,
 *   where the statement commits on its own, outside any inbox transaction.
 * So the handler gets a Drizzle transaction over the same transaction whose client refuses
 * statements and savepoints with `TRANSACTION_ENDED` once ended: as soon as the handler settles
 * (before inboxed records its result), or when a hung handler is abandoned. inboxed's own statements
 * go through Drizzle's transaction, never through this one. node-postgres has the same refusal in its
 * own path (`ObservedClient`).
 */
export interface HandlerTransaction<T> {
  tx: T;
  /**
   * Refuses every later statement of the handler's, once the savepoints it left open have settled:
   * when the handler settled, and when a hung one is abandoned. On postgres-js a savepoint whose
   * callback fails is rolled back by postgres-js itself, with a `ROLLBACK TO` sent on the connection
   * whatever transaction it serves by then: ended under an open savepoint, the transaction would end
   * and the connection serve the next delivery, whose work that `ROLLBACK TO` could undo (or whose
   * transaction it would abort). So the end waits for them, as it always did for a hung handler.
   */
  end(): Promise<void>;
  /**
   * Ends it for a hung handler (see `HandlerScope.abandon`): refuses its next statement at once,
   * cancels the statements of its that the server is still running (postgres-js), then waits for its
   * savepoints as {@link end} does. A handler hung in a statement (a lock wait, a long query), in a
   * savepoint or not, then gets the statement's error instead of keeping the delivery, and its
   * connection, for as long as the statement runs.
   */
  abandon(): Promise<void>;
  /** The handler's refused attempt to end the transaction itself (see `endingRefused`), if any. */
  refusal(): InboxError | undefined;
}

/** The parts of Drizzle's transaction that a second one over another client is built from. */
interface DrizzleTransactionParts {
  dialect: unknown;
  schema: unknown;
  session: {
    client: unknown;
    options: unknown;
    schema: unknown;
    constructor: new (client: unknown, dialect: unknown, schema: unknown, options: unknown) => unknown;
  };
  constructor: new (dialect: unknown, session: unknown, schema: unknown) => unknown;
}

/** A postgres-js query: lazy, sent through `handler` when first awaited or executed. */
interface PostgresJsQuery {
  handler: ((query: PostgresJsQuery) => void) & { debug?: unknown };
  /** postgres-js 3.x's cancel for this query (what `query.cancel()` calls), until it is cancelled once. */
  canceller?: ((query: PostgresJsQuery) => Promise<void>) | null;
  /** The query's cancel: in 4.x it settles once the server has taken the request (or could not be reached). */
  cancel?: () => Promise<unknown>;
  /** Set by postgres-js while the query is the one its connection is running (the pipeline's head). */
  active?: boolean;
  cursor?: unknown;
  readable?: unknown;
  writable?: unknown;
  reject(error: unknown): void;
}

/** postgres-js's transaction-scoped `sql`, as Drizzle's session calls it. */
interface ScopedSql {
  unsafe(...args: unknown[]): PostgresJsQuery;
  savepoint(...args: unknown[]): Promise<unknown>;
}

/** PGlite's transaction, as Drizzle's session calls it. */
interface PgliteTransaction {
  query(...args: unknown[]): Promise<unknown>;
}

/** Shared by a guarded transaction and its savepoints' clients. */
class GuardState extends StatementGate {
  private readonly savepoints = new Set<Promise<unknown>>();
  /** The handler's postgres-js queries sent to the server and not answered yet. */
  private readonly running = new Set<PostgresJsQuery>();

  /** Tracks a savepoint until postgres-js has settled it (its `ROLLBACK TO` included). */
  track(savepoint: Promise<unknown>): void {
    this.savepoints.add(savepoint);
    const forget = () => this.savepoints.delete(savepoint);
    savepoint.then(forget, forget);
  }

  /** Tracks a query postgres-js is sending, until the server answers it. */
  sending(query: PostgresJsQuery): void {
    this.running.add(query);
    const forget = () => this.running.delete(query);
    // Promise's own then: a postgres-js query's `then` would (re)start it; this only watches it.
    Promise.prototype.then.call(query, forget, forget);
  }

  async close(): Promise<void> {
    while (this.savepoints.size > 0) await Promise.allSettled([...this.savepoints]);
    this.closed = true;
  }

  /**
   * Abandonment: refuses the handler's next statement at once, cancels the one the server is running
   * for it, then waits for its savepoints (see {@link close}).
   *
   * Only the query at the head of the connection's pipeline (`active`) is cancelled: one still
   * queued behind it, cancelled, would be skipped by postgres-js when its turn came, with nothing
   * sent and no answer awaited, and the transaction's queue (its ROLLBACK included) would never move
   * again; one pipelined behind it would get its CancelRequest only on reaching the head, by when the
   * connection may serve someone else. Those fail anyway once the head's failure aborts the
   * transaction. And abandonment waits until the server has taken the CancelRequest, before the
   * transaction can end and its connection go back to the pool: a cancel for a statement that
   * ended meanwhile then reaches an idle backend, which ignores it, never the next user's statement.
   */
  async abandon(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.running].filter((query) => query.active === true).map(cancelDelivered));
    await this.close();
  }
}

/**
 * Sends postgres-js's CancelRequest for a running query (on a connection of its own, as its
 * `query.cancel()` does) and resolves once the server has taken it, or could not be reached, or
 * after {@link CANCEL_TIMEOUT_MS}. postgres-js 3.x's own `cancel()` drops the request's promise,
 * which rejects when the server cannot be reached: called through `canceller` instead, the
 * rejection is handled. 4.x's `cancel()` returns that promise. A cancel that cannot be delivered
 * changes nothing: the statement then ends on its own or with its connection, and abandonment waits
 * for it as it did before cancels.
 */
function cancelDelivered(query: PostgresJsQuery): Promise<void> {
  const send = cancelOnce(query);
  if (send === undefined) return Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  const delivered = Promise.resolve()
    .then(send)
    .then(
      () => undefined,
      () => undefined,
    );
  const waited = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, CANCEL_TIMEOUT_MS);
  });
  return Promise.race([delivered, waited]).finally(() => clearTimeout(timer));
}

/** Sends a query's CancelRequest, at most once per query; undefined when it has no cancel inboxed knows. */
const cancelled = new WeakSet<PostgresJsQuery>();
function cancelOnce(query: PostgresJsQuery): (() => Promise<unknown>) | undefined {
  if (cancelled.has(query)) return undefined;
  const { canceller, cancel } = query;
  let send: (() => Promise<unknown>) | undefined;
  if (typeof canceller === 'function') {
    query.canceller = null; // as 3.x's own cancel() does: a later query.cancel() sends nothing
    send = () => canceller(query);
  } else if (typeof cancel === 'function') {
    send = () => cancel.call(query);
  }
  if (send !== undefined) cancelled.add(query);
  return send;
}

/**
 * A refused statement, shaped like the postgres-js query Drizzle expects (it awaits it, or calls
 * `.values()` first). Lazy like one: it rejects only when awaited, so a refused query the handler
 * never awaits is not an unhandled rejection.
 */
function refusedQuery(error: InboxError): PromiseLike<never> {
  const refused: PromiseLike<never> & Record<string, unknown> = {
    // biome-ignore lint/suspicious/noThenProperty: a query is a thenable, and this stands for one.
    then: (onFulfilled, onRejected) => Promise.reject(error).then(onFulfilled, onRejected),
    catch: (onRejected: (reason: unknown) => unknown) => Promise.reject(error).catch(onRejected),
    finally: (onFinally: () => void) => Promise.reject(error).finally(onFinally),
    values: () => refused,
    execute: () => refused,
  };
  return refused;
}

/** The raw handle behind a guard; set by the class's static block, for {@link unguardedPostgresJs}. */
let rawHandleOf: (guarded: GuardedScopedSql) => ScopedSql;

/**
 * postgres-js: a query is checked when it is sent, not when it is made. postgres-js queries are
 * lazy (sent when first awaited or executed), so one made before the end but first awaited after it
 * is refused too, while cursors and `describe()` keep postgres-js's own timing.
 */
class GuardedScopedSql {
  // True private fields, not TypeScript's `private`: the handler reaches this object as
  // `tx.session.client`, and a plain property would hand it the transaction's raw postgres-js handle
  // (whose statements pass no guard, and in 4.x its own rollback/prepare) or the gate's switch.
  readonly #scoped: ScopedSql;
  readonly #state: GuardState;

  constructor(scoped: ScopedSql, state: GuardState) {
    this.#scoped = scoped;
    this.#state = state;
  }

  static {
    // Reachable from this module only: a static method would be reachable from the handler too
    // (`tx.session.client.constructor`).
    rawHandleOf = (guarded) => guarded.#scoped;
  }

  unsafe(...args: unknown[]): unknown {
    const state = this.#state;
    const refused = state.check(args[0]);
    if (refused !== undefined) return refusedQuery(refused);
    const query = this.#scoped.unsafe(...args);
    const send = query.handler;
    const sendTracked = (sent: PostgresJsQuery) => {
      state.sending(sent);
      return send(sent);
    };
    // postgres-js reads settings off the handler: `debug` (3.x and 4.x), and in 4.x the client's
    // `options` and its `cancel`; the guarded handler carries whatever the original one does.
    query.handler = Object.assign((sent: PostgresJsQuery) => (state.closed ? sent.reject(lateStatementRefused()) : sendTracked(sent)), send);
    // A cursor or a COPY stream left open would hold the connection under inboxed's COMMIT.
    for (const method of ['cursor', 'readable', 'writable'] as const) {
      query[method] = () => {
        throw streamRefused(`a postgres-js .${method}()`);
      };
    }
    return query;
  }

  savepoint(...args: unknown[]): PromiseLike<unknown> {
    const state = this.#state;
    if (state.closed) return refusedQuery(lateStatementRefused());
    const work = args[args.length - 1] as (nested: unknown) => unknown;
    const savepoint = this.#scoped.savepoint(...args.slice(0, -1), (nested: ScopedSql) => work(new GuardedScopedSql(nested, state)));
    state.track(savepoint);
    return savepoint;
  }
}

/** @internal For tests only: the raw postgres-js transaction handle behind a handler's `tx.session.client`. */
export function unguardedPostgresJs(client: unknown): unknown {
  return client instanceof GuardedScopedSql ? rawHandleOf(client) : undefined;
}

/** PGlite: its savepoints are statements too (Drizzle sends them through `query`). */
class GuardedPgliteTransaction {
  // True private fields: see GuardedScopedSql.
  readonly #transaction: PgliteTransaction;
  readonly #state: GuardState;

  constructor(transaction: PgliteTransaction, state: GuardState) {
    this.#transaction = transaction;
    this.#state = state;
  }

  query(...args: unknown[]): Promise<unknown> {
    const refused = this.#state.check(args[0]);
    if (refused !== undefined) return Promise.reject(refused);
    return this.#transaction.query(...args);
  }
}

/** The guarded client for a transaction's client, or undefined for a driver inboxed does not know. */
function guardedClient(client: unknown, state: GuardState): unknown {
  const methods = client as Record<string, unknown> | null;
  if (typeof methods?.unsafe === 'function' && typeof methods.savepoint === 'function') return new GuardedScopedSql(client as ScopedSql, state);
  if (typeof methods?.query === 'function' && 'closed' in methods) return new GuardedPgliteTransaction(client as PgliteTransaction, state);
  return undefined;
}

/**
 * @internal The handler's transaction over Drizzle's `tx` (see {@link HandlerTransaction}), built from
 * `tx`'s own classes so core imports no driver; undefined for a driver whose transaction client it
 * does not know.
 */
export function guardedHandlerTransaction<T>(tx: T): HandlerTransaction<T> | undefined {
  const parts = tx as unknown as DrizzleTransactionParts;
  const state = new GuardState();
  const client = guardedClient(parts.session?.client, state);
  if (client === undefined) return undefined;
  const { session } = parts;
  const guardedSession = new session.constructor(client, parts.dialect, session.schema, session.options);
  return {
    tx: new parts.constructor(parts.dialect, guardedSession, parts.schema) as T,
    end: () => state.close(),
    abandon: () => state.abandon(),
    refusal: () => state.refusal,
  };
}
