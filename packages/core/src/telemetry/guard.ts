import type { Context } from '@opentelemetry/api';
import type { OtelApi } from './api.js';

/**
 * Telemetry must never change what happens to a message. The OpenTelemetry specification forbids
 * API and SDK calls to throw, but a custom or bridged provider can; a throw escaping a measurement
 * taken between BEGIN and COMMIT would skip the ROLLBACK, and one escaping a span's `end()` after
 * COMMIT would report a committed message as failed, for ever. So every call into a provider goes
 * through here: what it throws is dropped, and reported once per process as a Node warning
 * (`INBOXED_TELEMETRY_FAILED`), so a broken provider is seen without flooding the log.
 */
let reported = false;

/** @internal Reports the first telemetry failure of the process; later ones are dropped silently (the first says so). */
export function telemetryFailed(error: unknown): void {
  if (reported) return;
  reported = true;
  try {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    process.emitWarning(
      `inboxed: an OpenTelemetry provider threw (${text}); that measurement or span was dropped and processing went on. Later telemetry failures are dropped without a warning.`,
      { code: 'INBOXED_TELEMETRY_FAILED' },
    );
  } catch {
    // A value whose text form throws: the warning is all that is lost.
  }
}

/** @internal Runs a telemetry step; what it throws is reported by {@link telemetryFailed} and `fallback` returned. */
export function safely<T>(step: () => T, fallback: T): T {
  try {
    return step();
  } catch (error) {
    telemetryFailed(error);
    return fallback;
  }
}

/**
 * @internal Runs `call` exactly once, inside `context` when the context manager lets it. A context
 * manager that throws, or never runs `call`, or returns something else, changes nothing: `call`'s
 * own result is returned and what `call` throws is rethrown unchanged.
 */
export function inContext<T>(otel: OtelApi, context: Context, call: () => T): T {
  let ran = false;
  let result: T | undefined;
  let threw: { error: unknown } | undefined;
  try {
    otel.context.with(context, () => {
      ran = true;
      try {
        result = call();
      } catch (error) {
        threw = { error };
      }
      return result;
    });
  } catch (error) {
    telemetryFailed(error);
  }
  if (threw !== undefined) throw threw.error;
  return ran ? (result as T) : call();
}
