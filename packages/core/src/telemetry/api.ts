import { createRequire } from 'node:module';
// Types only: erased from the JavaScript, so `@inboxed/core` loads without `@opentelemetry/api` installed.
import type * as Otel from '@opentelemetry/api';
import { telemetrySettings } from './config.js';

/** @internal The `@opentelemetry/api` module. */
export type OtelApi = typeof Otel;

let api: OtelApi | null | undefined;

/**
 * @internal `@opentelemetry/api`, resolved once on first use from where `@inboxed/core` is installed,
 * or `null` when it is not installed (or telemetry is turned off): then every instrument and span is skipped.
 * Loaded with `require` (the package ships CommonJS, and its global registry is shared with any ESM
 * copy), so the first delivery is already instrumented.
 */
export function otelApi(): OtelApi | null {
  if (telemetrySettings().settings.enabled === false) return null;
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
    const { generation } = telemetrySettings();
    if (cached === undefined || cached.provider !== provider || cached.generation !== generation) {
      if (version === null) version = scopeVersion();
      cached = { provider, generation, value: build(provider, otel, version) };
    }
    return cached.value;
  };
}

/** @internal The configured or global meter provider. */
export const currentMeterProvider = (otel: OtelApi): Otel.MeterProvider =>
  (telemetrySettings().settings.meterProvider as Otel.MeterProvider | undefined) ?? otel.metrics.getMeterProvider();

/** @internal The configured or global tracer provider. */
export const currentTracerProvider = (otel: OtelApi): Otel.TracerProvider =>
  (telemetrySettings().settings.tracerProvider as Otel.TracerProvider | undefined) ?? otel.trace.getTracerProvider();
