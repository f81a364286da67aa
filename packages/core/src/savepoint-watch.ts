import { InboxError, InboxErrorCodes } from './errors.js';

type Transaction = { transaction?: (work: (nested: unknown) => unknown, config?: unknown) => Promise<unknown> };

/**
 * @internal The handler's `tx`, with `tx.transaction(...)` (a savepoint) watched at every level.
 *
 * One transaction has one connection and one savepoint stack. Two savepoints of the same level open
 * at once (`Promise.all([tx.transaction(a), tx.transaction(b)])`) interleave on it: Drizzle names
 * both alike on node-postgres and PGlite, so one's RELEASE or ROLLBACK TO ends the other's, and on
 * postgres-js a ROLLBACK TO of one undoes the statements the other sent after it. A savepoint that
 * reported success then has its writes rolled back, and the message would have been `processed`
 * without them. So a second `transaction()` started while a sibling is open is refused at once (the
 * call rejects with `OVERLAPPING_SAVEPOINTS`), and the attempt fails with that code once the handler
 * returns, even if the handler caught the rejection: counted like any other failure. The same holds
 * for `tx.transaction()` called inside its own open savepoint's callback (use the callback's
 * `nested.transaction()` for a nested savepoint): on node-postgres and PGlite its savepoint has the
 * open one's name, so a later ROLLBACK TO would stop at the wrong one.
 *
 * The refusal itself is immediate: waiting for the open sibling would deadlock when the call comes
 * from inside that sibling's callback. Instead the handler is not done until every savepoint it
 * opened has settled (`run` awaits them before its transaction ends): otherwise an uncaught
 * refusal would end a `Promise.all`, and the handler, while the sibling still runs; on postgres-js
 * inboxed's ROLLBACK would then be pipelined before the sibling's statements, which would run after
 * it, outside the transaction.
 */
export function watchSavepoints<T>(tx: T): { tx: T; run<R>(handler: () => R | Promise<R>): Promise<R>; check(): void } {
  let overlap: InboxError | undefined;
  const open = new Set<Promise<unknown>>();
  const watch = <U>(level: U): U => {
    const original = (level as Transaction).transaction;
    if (typeof original !== 'function') return level;
    let running: Promise<unknown> | undefined;
    // The watch is an own property of this level's transaction object, not a wrapper made with
    // `Object.create(level)`: that would turn every transaction into a prototype with a map of its
    // own, and each of Drizzle's property reads on `tx` would go megamorphic (measured: about 40%
    // more Node CPU per message).
    const watched = level as Transaction;
    watched.transaction = (work, config) => {
      if (running !== undefined) {
        overlap ??= new InboxError(
          InboxErrorCodes.OVERLAPPING_SAVEPOINTS,
          'tx.transaction() was called while another tx.transaction() of the same level was still open: savepoints of one connection cannot run side by side (one would roll back the other). Await each before the next, and inside a savepoint use its own nested.transaction()',
        );
        return Promise.reject(overlap);
      }
      const call: Promise<unknown> = Promise.resolve(original.call(level, (nested: unknown) => work(watch(nested)), config)).finally(() => {
        running = undefined;
        open.delete(call);
      });
      running = call;
      open.add(call);
      return call;
    };
    return watched as U;
  };
  return {
    tx: watch(tx),
    /** Calls the handler; done once it and every savepoint it started have settled, even those it left running. */
    run: async (handler) => {
      try {
        return await handler();
      } finally {
        while (open.size > 0) await Promise.allSettled([...open]);
      }
    },
    check: () => {
      if (overlap !== undefined) throw overlap;
    },
  };
}
