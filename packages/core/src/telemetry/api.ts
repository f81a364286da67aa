import { createRequire } from 'node:module';
// Types only: erased from the JavaScript, so `@inboxed/core` loads without `@opentelemetry/api` installed.
import type * as Otel from '@opentelemetry/api';

/** @internal The `@opentelemetry/api` module. */
export type OtelApi = typeof Otel;

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

let api: OtelApi | null | undefined;
let settings: InboxTelemetryOptions = {};
/** Bumped on every `configureTelemetry`, so cached instruments and tracers are rebuilt. */
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

/**
 * @internal `@opentelemetry/api`, resolved once on first use from where `@inboxed/core` is installed,
 * or `null` when it is not installed (or telemetry is turned off): then every instrument and span is skipped.
 * Loaded with `require` (the package ships CommonJS, and its global registry is shared with any ESM
 * copy), so the first delivery is already instrumented.
 */
export function otelApi(): OtelApi | null {
  if (settings.enabled === false) return null;
  if (api === undefined) {
    try {
      api = createRequire(import.meta.url)('@opentelemetry/api') as OtelApi;
    } catch {
      api = null;
    }
  }
  return api;
}

/** @internal The instrumentation scope's version: this package's. */
function scopeVersion(): string | undefined {
  try {
    return (createRequire(import.meta.url)('../../package.json') as { version?: string }).version;
  } catch {
    return undefined;
  }
}

/** The instrumentation scope: `@inboxed/core` at its version. */
export const SCOPE_NAME = '@inboxed/core';
let version: string | undefined | null = null;

/**
 * @internal A value built from the current meter or tracer provider, rebuilt when the provider
 * changes: the global metrics API has no proxy provider, so a meter taken before NodeSDK started
 * would stay a no-op forever.
 */
export function perProvider<P extends object, T>(current: (otel: OtelApi) => P, build: (provider: P, otel: OtelApi, version: string | undefined) => T) {
  let cached: { provider: P; generation: number; value: T } | undefined;
  return (): T | undefined => {
    const otel = otelApi();
    if (otel === null) return undefined;
    const provider = current(otel);
    if (cached === undefined || cached.provider !== provider || cached.generation !== generation) {
      if (version === null) version = scopeVersion();
      cached = { provider, generation, value: build(provider, otel, version) };
    }
    return cached.value;
  };
}

/** @internal The configured or global meter provider. */
export const currentMeterProvider = (otel: OtelApi): Otel.MeterProvider =>
  (settings.meterProvider as Otel.MeterProvider | undefined) ?? otel.metrics.getMeterProvider();

/** @internal The configured or global tracer provider. */
export const currentTracerProvider = (otel: OtelApi): Otel.TracerProvider =>
  (settings.tracerProvider as Otel.TracerProvider | undefined) ?? otel.trace.getTracerProvider();
