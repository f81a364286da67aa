import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { afterEach, expect, it } from 'vitest';
import { configureTelemetry } from './config.js';
import { recordingMetrics } from './instruments.js';
import { startDeliveries } from './spans.js';

// With @opentelemetry/api installed but nothing registered (no SDK), every span and measurement
// would be dropped: the per-delivery work is skipped. Anything registered turns it back on at once.
const messages = [{ id: 'm1', payload: {}, headers: {} }];

afterEach(() => {
  configureTelemetry();
  context.disable();
  trace.disable();
  metrics.disable();
});

it('nothing registered: no metrics recorded and no delivery telemetry at all', () => {
  expect(recordingMetrics()).toBe(false);
  expect(startDeliveries(messages, 'c', undefined, 'orders')).toBeUndefined();
});

it('a meter provider alone: metrics without spans', () => {
  configureTelemetry({ meterProvider: new MeterProvider() });
  expect(recordingMetrics()).toBe(true);
  expect(startDeliveries(messages, 'c', undefined, 'orders')).toBeDefined();
});

it('a tracer provider, configured or registered later: delivery telemetry', () => {
  configureTelemetry({ tracerProvider: new BasicTracerProvider() });
  expect(startDeliveries(messages, 'c', undefined, 'orders')).toBeDefined();
  configureTelemetry();
  expect(startDeliveries(messages, 'c', undefined, 'orders')).toBeUndefined();
  trace.setGlobalTracerProvider(new BasicTracerProvider());
  expect(startDeliveries(messages, 'c', undefined, 'orders')).toBeDefined();
});

it('a context manager alone (a span could become active): delivery telemetry', () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  expect(startDeliveries(messages, 'c', undefined, 'orders')).toBeDefined();
});
