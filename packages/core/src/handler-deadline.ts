import { describeError } from './error-text.js';
import { InboxError, InboxErrorCodes, isInboxError } from './errors.js';
import { recordHandler } from './telemetry/instruments.js';

/** @internal The handler ran past `handlerTimeoutMs`. Counted as a failed attempt (`HANDLER_TIMEOUT`). */
export function handlerTimeoutError(timeoutMs: number, cause?: unknown): InboxError {
  return new InboxError(
    InboxErrorCodes.HANDLER_TIMEOUT,
    `the handler ran longer than handlerTimeoutMs (${timeoutMs} ms); its transaction was rolled back`,
    cause === undefined ? { details: { timeoutMs } } : { cause, details: { timeoutMs } },
  );
}

/** @internal What a handler threw after the consumer began to stop; see {@link failedWhileStopping}. */
export class FailedWhileStopping extends InboxError {}

/**
 * @internal What to make of `error`, thrown by a handler; `stopped` when the consumer's stop signal
 * had fired by the time it failed. Once it fired, the handler's own `signal` fired too, and a handler that honours it
 * (`fetch(url, { signal })`) fails: that is the deploy's doing, not the message's, and counting it
 * would dead-letter a slow message after `maxAttempts` restarts. So any failure after the stop
 * becomes {@link FailedWhileStopping}: retried, not counted. (A message that really fails is
 * counted at its next attempt.) A timeout stays counted: a handler that ignores both signals is
 * still bounded by `handlerTimeoutMs`.
 */
export function failedWhileStopping(error: unknown, stopped: boolean): unknown {
  if (!stopped || (isInboxError(error) && error.code === InboxErrorCodes.HANDLER_TIMEOUT)) return error;
  return new FailedWhileStopping(InboxErrorCodes.CONSUMER_STOPPING, `the handler failed after the consumer began to stop: ${describeError(error)}`, {
    cause: error,
  });
}

/**
 * @internal Runs a handler call under `timeoutMs` with one signal that fires at the deadline or
 * when `outer` (the consumer stopping) does.
 *
 * At the deadline the signal fires, and the call is waited for: a handler must never keep writing
 * through a transaction that was already ended (with postgres-js, a leaked transaction's later
 * statements would run outside any transaction). Once it settles, whatever it returned, the result
 * is a timeout. Only when `abandon` is given (a driver that can make the handler's later statements
 * fail) and the handler ignores the signal for another `timeoutMs`, is it abandoned: once `abandon`
 * resolves, the timeout is thrown without waiting further.
 * With `consumer`, the call is recorded as `inboxed.handler.duration`.
 */
export async function runWithDeadline<T>(
  timeoutMs: number | null,
  outer: AbortSignal | undefined,
  call: (signal: AbortSignal) => Promise<T>,
  abandon?: () => void | Promise<void>,
  consumer?: string,
): Promise<T> {
  if (consumer === undefined) return runBounded(timeoutMs, outer, call, abandon).catch(rethrowInspectable);
  // `inboxed.handler.duration`: the handler's own time, timeouts (`error.type` HANDLER_TIMEOUT) included.
  const started = performance.now();
  try {
    const value = await runBounded(timeoutMs, outer, call, abandon);
    recordHandler(consumer, (performance.now() - started) / 1000, undefined);
    return value;
  } catch (thrown) {
    const error = inspectable(thrown);
    recordHandler(consumer, (performance.now() - started) / 1000, { thrown: error });
    throw error;
  }
}

function rethrowInspectable(thrown: unknown): never {
  throw inspectable(thrown);
}

/**
 * What the handler threw, safe for every later step to inspect (its prototype, `code`, `cause`,
 * `message`, brands). A value whose inspection throws (a Proxy with throwing traps, a revoked
 * Proxy, a getter that throws) is replaced by an Error saying so: otherwise classifying the failure
 * would throw, and the message would retry as an uncounted internal error for ever instead of being
 * counted as the handler's failure like any other throw.
 */
function inspectable(thrown: unknown): unknown {
  try {
    for (let link = thrown, depth = 0; (typeof link === 'object' || typeof link === 'function') && link !== null && depth < 8; depth++) {
      Object.getPrototypeOf(link);
      const { code, message, name, stack } = link as Record<string, unknown>;
      void [code, message, name, stack];
      link = (link as { cause?: unknown }).cause;
    }
    return thrown;
  } catch (inspecting) {
    return new Error(`the handler threw a value that cannot be inspected (${reasonOf(inspecting)})`);
  }
}

/** What inspecting a hostile value threw, as a short text; that may be hostile too. */
function reasonOf(inspecting: unknown): string {
  try {
    return inspecting instanceof Error ? String(inspecting.message).slice(0, 200) : 'its traps throw';
  } catch {
    return 'its traps throw';
  }
}

async function runBounded<T>(
  timeoutMs: number | null,
  outer: AbortSignal | undefined,
  call: (signal: AbortSignal) => Promise<T>,
  abandon?: () => void | Promise<void>,
): Promise<T> {
  if (timeoutMs === null) return call(outer ?? new AbortController().signal);
  const deadline = new AbortController();
  const signal = outer === undefined ? deadline.signal : AbortSignal.any([deadline.signal, outer]);
  let timedOut = false;
  let hung: NodeJS.Timeout | undefined;
  let abandoned: ((error: unknown) => void) | undefined;
  let abandoning: Promise<void> | undefined;
  const timer = setTimeout(() => {
    timedOut = true;
    deadline.abort(handlerTimeoutError(timeoutMs));
    if (abandon !== undefined) {
      hung = setTimeout(() => {
        // Abandoned once the driver says so (postgres-js first waits for open savepoints).
        abandoning = Promise.resolve().then(abandon);
        void abandoning.then(() => abandoned?.(handlerTimeoutError(timeoutMs)), abandoned);
      }, timeoutMs);
    }
  }, timeoutMs);
  const running = call(signal);
  const settled = abandon === undefined ? running : Promise.race([running, new Promise<never>((_, reject) => (abandoned = reject))]);
  let result: { ok: true; value: T } | { ok: false; error: unknown };
  try {
    result = { ok: true, value: await settled };
  } catch (error) {
    result = { ok: false, error };
  } finally {
    clearTimeout(timer);
    clearTimeout(hung);
    running.catch(() => {}); // an abandoned call may still reject later; it has been accounted for
  }
  // A handler that settles while it is being abandoned: the abandonment still finishes before the
  // transaction may end. It may be delivering a cancel for the statement that just ended (postgres-js),
  // which must reach the server while the connection is still this transaction's. (Its failure, if
  // any, was handed to `abandoned`, which lost the race to the handler's own result.)
  if (abandoning !== undefined) await abandoning.catch(() => {});
  if (timedOut) throw handlerTimeoutError(timeoutMs, result.ok ? undefined : result.error);
  if (!result.ok) throw result.error;
  return result.value;
}
