import { context, propagation } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll } from 'vitest';

/** What `useInMemoryTracing` hands the tracer provider to: core's `configureTelemetry`. */
export type ConfigureTelemetry = (options?: { tracerProvider?: BasicTracerProvider }) => void;

/**
 * Registers beforeAll/afterAll for a `describe` that reads inboxed's spans, as an application with
 * the OpenTelemetry SDK would run it: W3C trace-context propagation, an async-hooks context manager,
 * and a tracer provider exporting to memory, given to inboxed through `configure`. Core's
 * `configureTelemetry` is passed in rather than imported, so this package does not depend on core
 * (core's own tests depend on this package). Afterwards inboxed and the globals are reset.
 */
export function useInMemoryTracing(configure: ConfigureTelemetry): InMemorySpanExporter {
  const exporter = new InMemorySpanExporter();
  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    configure({ tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }) });
  });
  afterAll(() => {
    configure();
    context.disable();
    propagation.disable();
  });
  return exporter;
}
