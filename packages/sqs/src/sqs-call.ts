/**
 * How long an SQS call other than a receive (delete, visibility change, dead-letter send, queue
 * attributes) may take, the SDK's own retries included. SQS answers them in milliseconds; without a
 * bound a hung connection would hold them for the SDK's socket timeout (15 minutes), settlement and
 * heartbeats behind them.
 */
export const SQS_CALL_TIMEOUT_MS = 10_000;

/** What a long poll may take beyond its `WaitTimeSeconds` before it counts as hung. */
export const RECEIVE_TIMEOUT_MARGIN_MS = 10_000;

/** The time a `ReceiveMessage` long-polling `waitTimeSeconds` may take before it is given up as hung. */
export function receiveTimeoutMs(waitTimeSeconds: number): number {
  return waitTimeSeconds * 1000 + RECEIVE_TIMEOUT_MARGIN_MS;
}

/**
 * An SQS call that got no answer in time and was aborted. It is the `cause` of the `SQS_*` error
 * that reports the call (named `TimeoutError`, so batch failures list it under that code). Whether
 * SQS carried the call out is unknown.
 */
export class SqsCallTimeoutError extends Error {
  override readonly name = 'TimeoutError';
}

/**
 * Runs one SQS call (`call` passes the signal to `client.send(command, { abortSignal })`) and aborts
 * it after `timeoutMs`, rejecting with {@link SqsCallTimeoutError}. `stop` aborts it too (then the
 * SDK's own abort error is thrown, as without a timeout). The timer and the listener on `stop` are
 * removed when the call ends, so a long-lived stop signal collects nothing.
 */
export async function callWithTimeout<T>(what: string, timeoutMs: number, call: (abortSignal: AbortSignal) => Promise<T>, stop?: AbortSignal): Promise<T> {
  const controller = new AbortController();
  const onStop = () => controller.abort(stop?.reason);
  if (stop?.aborted === true) onStop();
  else stop?.addEventListener('abort', onStop, { once: true });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, timeoutMs);
  try {
    return await call(controller.signal);
  } catch (error) {
    if (timedOut) throw new SqsCallTimeoutError(`${what} got no answer within ${timeoutMs} ms`, { cause: error });
    throw error;
  } finally {
    clearTimeout(timer);
    stop?.removeEventListener('abort', onStop);
  }
}

/** True for a call aborted by {@link callWithTimeout}: SQS may or may not have carried it out. */
export function isCallTimeout(error: unknown): boolean {
  return error instanceof SqsCallTimeoutError;
}
