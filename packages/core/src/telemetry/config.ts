/**
 * The public side of inboxed's telemetry settings, free of OpenTelemetry types so that
 * `@inboxed/core`'s declarations compile without `@opentelemetry/api` installed.
 */

/** A meter provider: `@opentelemetry/api`'s `MeterProvider` (an SDK `MeterProvider`, NodeSDK's). Typed structurally so these declarations need no OpenTelemetry types. */
export interface MeterProviderLike {
  getMeter(name: string, version?: string, options?: { schemaUrl?: string }): object;
}

/** A tracer provider: `@opentelemetry/api`'s `TracerProvider` (an SDK `BasicTracerProvider`, NodeSDK's). */
export interface TracerProviderLike {
  getTracer(name: string, version?: string, options?: { schemaUrl?: string }): object;
}

/**
 * Where inboxed's metrics and spans go. By default they go where every instrumentation library's
 * go: the providers registered globally with `@opentelemetry/api` (NodeSDK's `start()` registers
 * them), and nowhere when none is registered or `@opentelemetry/api` is not installed.
 */
export interface InboxTelemetryOptions {
  /** Record metrics and spans at all. @defaultValue true */
  enabled?: boolean;
  /** The meter provider for inboxed's instruments. @defaultValue the global one, `metrics.getMeterProvider()` */
  meterProvider?: MeterProviderLike;
  /** The tracer provider for inboxed's spans. @defaultValue the global one, `trace.getTracerProvider()` */
  tracerProvider?: TracerProviderLike;
}

let settings: InboxTelemetryOptions = {};
let generation = 0;

/**
 * Sets where inboxed's OpenTelemetry metrics and spans go, for every processor and consumer of this
 * process (like an instrumentation's `setMeterProvider`). Not needed with NodeSDK or any globally
 * registered providers: those are used by default. Calling it again replaces the previous settings;
 * `configureTelemetry()` restores the defaults, `configureTelemetry({ enabled: false })` turns
 * inboxed's telemetry off.
 *
 * ```ts
 * configureTelemetry({ meterProvider, tracerProvider });
 * ```
 */
export function configureTelemetry(options: InboxTelemetryOptions = {}): void {
  settings = { ...options };
  generation++;
}

/** @internal The current settings, and a number bumped by every `configureTelemetry` (so cached instruments and tracers are rebuilt). */
export function telemetrySettings(): { settings: InboxTelemetryOptions; generation: number } {
  return { settings, generation };
}
