import { failedWhileStopping, runWithDeadline } from './handler-deadline.js';
import { watchSavepoints } from './savepoint-watch.js';
import type { HandlerScope } from './transaction.js';
import type { AnyPgDatabase, TransactionOf } from './types.js';

/**
 * @internal Calls the handler's code inside an inbox transaction: with the handler's `tx` (its
 * savepoints watched), under `handlerTimeoutMs`, and ends that `tx` as soon as the call settles
 * ({@link endHandlerScope}): before inboxed records the outcome (a rejection, a stored result) and
 * before the completion check, so a statement the handler left running cannot land between them or
 * after them. It is refused with `TRANSACTION_ENDED` instead of rolling back, or joining, a
 * transaction already judged.
 */
export async function runHandler<TDb extends AnyPgDatabase, R>(
  scope: HandlerScope<TDb>,
  timeoutMs: number | null,
  signal: AbortSignal | undefined,
  consumer: string | undefined,
  call: (tx: TransactionOf<TDb>, signal: AbortSignal) => R | Promise<R>,
): Promise<R> {
  const savepoints = watchSavepoints(scope.tx);
  let returned: { value: R } | { error: unknown; stopped: boolean };
  try {
    returned = { value: await runWithDeadline(timeoutMs, signal, (deadline) => savepoints.run(() => call(savepoints.tx, deadline)), scope.abandon, consumer) };
  } catch (error) {
    // Whether the consumer was stopping when the handler failed, not later (ending the scope below can take a while).
    returned = { error, stopped: signal?.aborted === true };
  }
  await endHandlerScope(scope);
  // A COMMIT or ROLLBACK the handler tried fails the attempt, whatever the handler made of the refusal.
  const refusal = scope.refusal();
  if (refusal !== undefined) throw refusal;
  if ('error' in returned) throw failedWhileStopping(returned.error, returned.stopped);
  savepoints.check();
  return returned.value;
}

/**
 * Ends the handler's `tx` once the statements it started before it settled have reached
 * the driver. Drizzle hands a query to the driver a few promise reactions after it is started, so a
 * statement the handler started without awaiting it would otherwise be refused or sent depending on
 * how deep that chain is. The rest of the current turn of the event loop lets every such statement
 * through, into the transaction ahead of inboxed's own statements and its completion check. One sent
 * later (from a timer, or chained on a query's answer) is refused, unless it comes before that turn
 * ends (a timer already due when the handler settled inside a `setImmediate` callback): then it is
 * one more statement of the transaction, ahead of the check. Whichever it is, it cannot land after
 * the check, and a statement that would end the transaction is refused whenever it comes.
 */
async function endHandlerScope<TDb extends AnyPgDatabase>(scope: HandlerScope<TDb>): Promise<void> {
  await new Promise<void>((resolve) => setImmediate(resolve));
  await scope.end();
}
