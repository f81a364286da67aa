import { context, propagation, type SpanContext } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { AggregationTemporality, type DataPoint, type Histogram, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from '../__tests__/migrated-database.js';
import { ConsumerEventEmitter } from '../adapter/events.js';
import { InFlight } from '../adapter/in-flight.js';
import { callProcessor } from '../adapter/processor-call.js';
import { PermanentError } from '../errors.js';
import type { InboxMessage } from '../types.js';
import { withInboxBatch } from '../with-inbox-batch.js';
import { withInbox } from '../with-inbox.js';
import { startInboxRetention } from '../retention-scheduler.js';
import { configureTelemetry } from './config.js';
import { recordRetentionRun } from './instruments.js';
import { parseXRayTraceHeader } from './messaging.js';

class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const PRODUCER_SPAN_ID = 'b7ad6b7169203331';
const traceparent = (spanId = PRODUCER_SPAN_ID) => `00-${TRACE_ID}-${spanId}-01`;

describe('OpenTelemetry metrics and spans', () => {
  const database = useMigratedDatabase('node-postgres');
  const contextManager = new AsyncLocalStorageContextManager();
  let reader: TestReader;
  let exporter: InMemorySpanExporter;

  beforeAll(() => {
    context.setGlobalContextManager(contextManager.enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  });
  afterAll(() => {
    context.disable();
    propagation.disable();
  });
  beforeEach(() => {
    reader = new TestReader();
    exporter = new InMemorySpanExporter();
    configureTelemetry({
      meterProvider: new MeterProvider({ readers: [reader] }),
      tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    });
  });
  afterEach(() => configureTelemetry());

  /** Every data point of a metric, with its attributes. */
  async function points(name: string): Promise<DataPoint<number | Histogram>[]> {
    const { resourceMetrics } = await reader.collect();
    type Point = DataPoint<number | Histogram>;
    return resourceMetrics.scopeMetrics.flatMap((scope) =>
      scope.metrics.filter((m) => m.descriptor.name === name).flatMap((m) => m.dataPoints as unknown as Point[]),
    );
  }
  const sum = async (name: string, where: Record<string, unknown> = {}) =>
    (await points(name))
      .filter((p) => Object.entries(where).every(([k, v]) => p.attributes[k] === v))
      .reduce((total, p) => total + (typeof p.value === 'number' ? p.value : p.value.count), 0);
  const spansNamed = (name: string): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.name === name);
  const parentOf = (span: ReadableSpan): string | undefined => span.parentSpanContext?.spanId;

  it('records outcomes, durations and spans for deliveries through a consumer layer (real PostgreSQL)', async () => {
    const process = withInbox(async (message: InboxMessage) => {
      const { fail } = message.payload as { fail?: string };
      if (fail === 'retry') throw new Error('try later');
      if (fail === 'permanent') throw new PermanentError('never');
    }, database.options());
    const events = new ConsumerEventEmitter();
    const inFlight = new InFlight();
    events.instrument({ system: 'rabbitmq', destination: 'orders' }, inFlight);
    const deliver = async (message: InboxMessage) => {
      const receivedAt = new Date();
      const [outcome] = await inFlight.track(callProcessor(process, [message], undefined, events));
      events.emitOutcome(outcome!, receivedAt);
      return outcome!;
    };
    const statuses = [];
    statuses.push((await deliver({ id: 'm1', payload: {}, headers: { traceparent: traceparent() } })).status);
    for (const id of ['m2', 'm3']) statuses.push((await deliver({ id, payload: {} })).status);
    statuses.push((await deliver({ id: 'm1', payload: {} })).status);
    statuses.push((await deliver({ id: 'm4', payload: { fail: 'retry' } })).status);
    statuses.push((await deliver({ id: 'm5', payload: { fail: 'permanent' } })).status);
    expect(statuses).toEqual(['processed', 'processed', 'processed', 'duplicate', 'retry', 'dead-letter']);

    const common = { 'messaging.system': 'rabbitmq', 'messaging.destination.name': 'orders', 'inboxed.consumer': 'c' };
    expect(await sum('inboxed.outcomes', { ...common, 'inboxed.outcome.status': 'processed' })).toBe(3);
    expect(await sum('inboxed.outcomes', { ...common, 'inboxed.outcome.status': 'duplicate' })).toBe(1);
    expect(await sum('inboxed.outcomes', { ...common, 'inboxed.outcome.status': 'retry', 'inboxed.outcome.reason': 'handler-failed' })).toBe(1);
    expect(await sum('inboxed.outcomes', { 'inboxed.outcome.status': 'dead-letter', 'inboxed.outcome.reason': 'permanent-failure' })).toBe(1);
    expect(await sum('inboxed.retries')).toBe(1);
    expect(await sum('inboxed.dead_letters', { 'error.type': 'PERMANENT_FAILURE' })).toBe(1);
    expect(await sum('messaging.client.consumed.messages', { 'messaging.operation.name': 'process' })).toBe(6);
    expect(await sum('messaging.process.duration')).toBe(6);
    expect(await sum('messaging.process.duration', { 'error.type': 'HANDLER_FAILED' })).toBe(1);
    expect(await sum('inboxed.settle.duration')).toBe(6);
    expect(await sum('inboxed.handler.duration')).toBe(5); // the duplicate never ran it
    expect(await sum('inboxed.handler.duration', { 'error.type': 'Error' })).toBe(1);
    expect(await sum('inboxed.transaction.duration', { 'inboxed.transaction.result': 'committed' })).toBe(4);
    expect(await sum('inboxed.transaction.duration', { 'inboxed.transaction.result': 'handler' })).toBe(2);
    expect(await sum('inboxed.claim.duration', { 'inboxed.claim.result': 'claimed' })).toBe(5);
    expect(await sum('inboxed.claim.duration', { 'inboxed.claim.result': 'known' })).toBe(1);
    const [gauge] = await points('inboxed.deliveries.in_flight');
    expect(gauge?.value).toBe(0);
    expect(gauge?.attributes).toEqual({ 'messaging.system': 'rabbitmq', 'messaging.destination.name': 'orders' });
    expect((await points('messaging.process.duration'))[0]?.attributes).toMatchObject({ 'messaging.operation.name': 'process' });

    const deliveries = spansNamed('process orders');
    expect(deliveries).toHaveLength(6);
    const first = deliveries[0]!;
    expect(first.kind).toBe(4); // CONSUMER
    expect(first.spanContext().traceId).toBe(TRACE_ID);
    expect(parentOf(first)).toBe(PRODUCER_SPAN_ID);
    expect(first.attributes).toMatchObject({
      'messaging.system': 'rabbitmq',
      'messaging.operation.type': 'process',
      'messaging.message.id': 'm1',
      'inboxed.outcome.status': 'processed',
    });
    const transactions = spansNamed('inboxed transaction');
    expect(transactions).toHaveLength(6);
    expect(parentOf(transactions[0]!)).toBe(first.spanContext().spanId);
    expect(transactions[0]!.spanContext().traceId).toBe(TRACE_ID);
    const failed = deliveries.find((s) => s.attributes['messaging.message.id'] === 'm5')!;
    expect(failed.status.code).toBe(2); // ERROR
    expect(failed.attributes).toMatchObject({ 'inboxed.outcome.status': 'dead-letter', 'error.type': 'PERMANENT_FAILURE' });
    expect(deliveries.find((s) => s.attributes['messaging.message.id'] === 'm2')!.spanContext().traceId).not.toBe(TRACE_ID);
  });

  it('a batch: one span per delivery, one transaction span linking to them', async () => {
    const process = withInboxBatch(async () => {}, database.options());
    const events = new ConsumerEventEmitter();
    events.instrument({ system: 'kafka', consumerGroup: 'g' });
    const outcomes = await callProcessor(
      process,
      ['b1', 'b2', 'b3'].map((id, i) => ({ id, payload: {}, headers: { traceparent: traceparent(`00f067aa0ba902b${i}`) } })),
      undefined,
      events,
      'payments',
    );
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'processed', 'processed']);
    const deliveries = spansNamed('process payments');
    expect(deliveries.map(parentOf)).toEqual(['00f067aa0ba902b0', '00f067aa0ba902b1', '00f067aa0ba902b2']);
    expect(deliveries[0]!.attributes).toMatchObject({ 'messaging.consumer.group.name': 'g', 'messaging.destination.name': 'payments' });
    const [transaction] = spansNamed('inboxed transaction');
    expect(parentOf(transaction!)).toBeUndefined();
    expect(transaction!.links.map((l) => l.context.spanId).sort()).toEqual(deliveries.map((s) => s.spanContext().spanId).sort());
    expect(await sum('messaging.process.duration', { 'messaging.batch.message_count': 3 })).toBe(1);
  });

  it("a spent redelivery's wait for another copy's claim is a `probe` transaction that ends `rolled-back`, not an error", async () => {
    const { t } = database;
    await t.query(`insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('c', 'spent', 1, 'ATTEMPT_UNFINISHED')`);
    const process = withInbox(async () => {}, database.options({ maxAttempts: 1 }));
    expect(await process({ id: 'spent', payload: {}, redelivered: true })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
    expect(await sum('inboxed.transaction.duration', { 'inboxed.transaction.operation': 'probe', 'inboxed.transaction.result': 'rolled-back' })).toBe(1);
    expect(await sum('inboxed.transaction.duration')).toBe(1);
    const [span] = spansNamed('inboxed transaction');
    expect(span?.attributes).toMatchObject({ 'inboxed.transaction.operation': 'probe', 'inboxed.transaction.result': 'rolled-back' });
    expect(span?.status.code).not.toBe(2); // SpanStatusCode.ERROR
  });

  it('recordRetentionRun: deleted rows and the oldest age in seconds', async () => {
    recordRetentionRun({ deleted: 7, oldestAgeMs: 90_000, consumer: 'c' });
    recordRetentionRun({ deleted: 2 });
    expect(await sum('inboxed.retention.deleted_rows')).toBe(9);
    expect((await points('inboxed.retention.oldest_age'))[0]).toMatchObject({ value: 90, attributes: { 'inboxed.consumer': 'c' } });
  });

  it('a retention run records what it deleted and the oldest row left', async () => {
    const { t } = database;
    await t.query(`insert into "${t.schema}".inbox (consumer, message_id, status, completed_at)
      select 'c', 'old-' || g, 'processed', now() - interval '2 days' from generate_series(1, 12) g`);
    await t.query(
      `insert into "${t.schema}".inbox (consumer, message_id, status, completed_at) values ('c', 'recent', 'processed', now() - interval '1 hour')`,
    );
    const retention = startInboxRetention(t.db, { olderThanMs: 86_400_000, everyMs: 3_600_000, consumer: 'c', tables: { schema: t.schema } });
    await retention.runNow();
    await retention.stop();
    expect(await sum('inboxed.retention.deleted_rows')).toBe(12);
    const [oldest] = await points('inboxed.retention.oldest_age');
    expect(oldest?.attributes).toEqual({ 'inboxed.consumer': 'c' });
    expect(oldest?.value as number).toBeGreaterThan(3_500);
    expect(oldest?.value as number).toBeLessThan(3_700);
  });

  it('turned off (or with no SDK registered): processing works and nothing is recorded', async () => {
    configureTelemetry({ enabled: false });
    const process = withInbox(async () => {}, database.options());
    const [outcome] = await callProcessor(process, [{ id: 'x', payload: {}, headers: { traceparent: traceparent() } }], undefined, new ConsumerEventEmitter());
    expect(outcome!.status).toBe('processed');
    configureTelemetry(); // the global providers: none registered, so the API's no-ops
    const [again] = await callProcessor(process, [{ id: 'y', payload: {} }], undefined, new ConsumerEventEmitter());
    expect(again!.status).toBe('processed');
    expect(exporter.getFinishedSpans()).toEqual([]);
  });
});

describe('parseXRayTraceHeader', () => {
  it('maps Root and Parent to W3C ids, in any field order', () => {
    expect(parseXRayTraceHeader('Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1')).toEqual({
      traceId: '5759e988bd862e3fe1be46a994272793',
      spanId: '53995c3f42cd8ad8',
      sampled: true,
    } satisfies Partial<SpanContext> & { sampled: boolean });
    expect(parseXRayTraceHeader('Sampled=0;Parent=53995C3F42CD8AD8;Root=1-5759E988-BD862E3FE1BE46A994272793;Lineage=a87bd80c:1')).toMatchObject({
      spanId: '53995c3f42cd8ad8',
      sampled: false,
    });
  });
  it('refuses headers without a parent or with a malformed root', () => {
    expect(parseXRayTraceHeader('Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1')).toBeUndefined();
    expect(parseXRayTraceHeader('Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8')).toBeUndefined();
    expect(parseXRayTraceHeader('')).toBeUndefined();
  });
});
