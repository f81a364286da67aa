import { InboxError, InboxErrorCodes } from '../errors.js';

/**
 * @internal The handler's view of an inbox transaction on the drivers where inboxed uses Drizzle's
 * own transaction (postgres-js, PGlite), and the switch that ends it.
 *
 * Both drivers send a statement made through a transaction's client whenever it is made, also after
 * inboxed's completion check and after COMMIT:
 * - between the check and COMMIT, a raw ROLLBACK (or a failing statement) ends or aborts the
 *   transaction after the check passed: COMMIT then answers without an error, and the attempt
 *   would be `processed` with nothing committed;
 * - after COMMIT, on postgres-js the connection may already serve the next delivery, whose
 *   transaction would take the statement in (and commit or lose it with its own work), or sit idle,
 *   where the statement commits on its own, outside any inbox transaction.
 * So the handler gets a Drizzle transaction over the same transaction whose client refuses
 * statements and savepoints with `TRANSACTION_ENDED` once closed: when the handler returns, or when a
 * hung handler is abandoned. inboxed's own statements keep going through Drizzle's transaction.
 * node-postgres has the same refusal in its own path (`ObservedClient`).
 */
export interface HandlerTransaction<T> {
  tx: T;
  /** Refuses every later statement of the handler's. */
  close(): void;
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

/** postgres-js's transaction-scoped `sql`, as Drizzle's session calls it. */
interface ScopedSql {
  unsafe(...args: unknown[]): { execute(): unknown };
  savepoint(...args: unknown[]): Promise<unknown>;
}

/** PGlite's transaction, as Drizzle's session calls it. */
interface PgliteTransaction {
  query(...args: unknown[]): Promise<unknown>;
}

interface GuardState {
  closed: boolean;
}

function transactionEnded(): InboxError {
  return new InboxError(
    InboxErrorCodes.TRANSACTION_ENDED,
    "a statement was sent through the handler's tx after the handler returned; its transaction is over (await every statement inside the handler)",
  );
}

/** A refused statement, shaped like the postgres-js query Drizzle expects (it awaits it, or calls `.values()` first). */
function refusedQuery(): Promise<never> {
  const refused = Promise.reject(transactionEnded());
  return Object.assign(refused, { values: () => refused, execute: () => refused });
}

/**
 * postgres-js: a statement made while open is started at once rather than when first awaited
 * (postgres-js queries are lazy), so one made before the handler returned but awaited later still
 * goes out inside the transaction, ahead of the check, instead of after COMMIT.
 */
class GuardedScopedSql {
  constructor(
    private readonly scoped: ScopedSql,
    private readonly state: GuardState,
  ) {}

  unsafe(...args: unknown[]): unknown {
    if (this.state.closed) return refusedQuery();
    const query = this.scoped.unsafe(...args);
    query.execute();
    return query;
  }

  savepoint(...args: unknown[]): Promise<unknown> {
    if (this.state.closed) return refusedQuery();
    const work = args[args.length - 1] as (nested: unknown) => unknown;
    return this.scoped.savepoint((nested: ScopedSql) => work(new GuardedScopedSql(nested, this.state)));
  }
}

/** PGlite: its savepoints are statements too (Drizzle sends them through `query`). */
class GuardedPgliteTransaction {
  constructor(
    private readonly transaction: PgliteTransaction,
    private readonly state: GuardState,
  ) {}

  query(...args: unknown[]): Promise<unknown> {
    if (this.state.closed) return Promise.reject(transactionEnded());
    return this.transaction.query(...args);
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
  const state: GuardState = { closed: false };
  const client = guardedClient(parts.session?.client, state);
  if (client === undefined) return undefined;
  const { session } = parts;
  const guardedSession = new session.constructor(client, parts.dialect, session.schema, session.options);
  return {
    tx: new parts.constructor(parts.dialect, guardedSession, parts.schema) as T,
    close: () => {
      state.closed = true;
    },
  };
}
