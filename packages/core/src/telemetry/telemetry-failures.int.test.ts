// A telemetry provider that throws must not change what happens to a message. The OpenTelemetry
// specification forbids providers to throw, but a custom or bridged one can; inboxed drops what it
// throws (one process warning) and carries on. Outcomes are checked against the database's rows,
// read over a connection of their own.
import { metrics, trace } from '@opentelemetry/api';
import { databaseUrl } from '@inboxed/test-support';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from '../__tests__/migrated-database.js';
import { ConsumerEventEmitter } from '../adapter/events.js';
import { callProcessor } from '../adapter/processor-call.js';
import type { InboxMessage } from '../types.js';
import { withInboxBatch } from '../with-inbox-batch.js';
import { withInbox } from '../with-inbox.js';
import { configureTelemetry } from './config.js';

const boom = () => {
  throw new Error('telemetry provider failure');
};
const throwingInstrument = { add: boom, record: boom, addCallback: boom, removeCallback: boom };
/** A meter whose every instrument throws on use. */
const throwingMeterProvider = {
  getMeter: () => new Proxy({}, { get: (_target, name) => (name === 'then' ? undefined : () => throwingInstrument) }),
};
/** A meter provider that cannot even hand out a meter. */
const brokenMeterProvider = { getMeter: boom };
const throwingSpan = new Proxy({}, { get: (_target, name) => (name === 'then' ? undefined : boom) });
const startSpanThrows = { getTracer: () => ({ startSpan: boom, startActiveSpan: boom }) };
const spansThrow = { getTracer: () => ({ startSpan: () => throwingSpan, startActiveSpan: boom }) };

/** A meter whose claim histogram throws on its first `failures` records; the rest works. */
function claimMeterFailing(failures: number) {
  let left = failures;
  const quiet = { add() {}, record() {}, addCallback() {}, removeCallback() {} };
  const claim = {
    ...quiet,
    record() {
      if (left-- > 0) boom();
    },
  };
  const meter = new Proxy(
    {},
    { get: (_target, name) => (name === 'then' ? undefined : (instrument: string) => (instrument === 'inboxed.claim.duration' ? claim : quiet)) },
  );
  return { getMeter: () => meter };
}

async function rowsOutside(sql: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    return (await client.query<{ id: string }>(sql)).rows.map((row) => row.id);
  } finally {
    await client.end();
  }
}

describe('telemetry providers that throw', () => {
  const database = useMigratedDatabase('node-postgres', { poolSize: 1 });
  const warnings: Error[] = [];
  const onWarning = (warning: Error) => warnings.push(warning);
  beforeEach(() => {
    process.on('warning', onWarning);
  });
  afterEach(() => {
    process.off('warning', onWarning);
    configureTelemetry();
    metrics.disable();
    trace.disable();
  });

  const handler = async (message: InboxMessage, tx: Parameters<Parameters<typeof withInbox>[0]>[1]) => {
    await (tx as any).insert(database.t.effects).values({ messageId: message.id });
  };
  const effects = () => rowsOutside(`select message_id as id from "${database.t.schema}".effects order by 1`);
  const inbox = () => rowsOutside(`select message_id as id from "${database.t.schema}".inbox order by 1`);

  it('a measurement that throws between BEGIN and COMMIT leaves no open transaction on the pooled connection: the next message cannot commit its claim', async () => {
    const process = withInbox(handler as never, database.options());
    configureTelemetry({ meterProvider: claimMeterFailing(2) as never });
    const first = await process({ id: 'A', payload: {} });
    const b = await process({ id: 'B', payload: {} });
    const again = await process({ id: 'A', payload: {} });
    // Telemetry changed nothing: A was processed at once (before the fix the throw skipped the
    // ROLLBACK, B's COMMIT committed A's claim, and A's redelivery was acked as a duplicate with no effect).
    expect([first.status, b.status, again.status]).toEqual(['processed', 'processed', 'duplicate']);
    expect(await effects()).toEqual(['A', 'B']);
    expect(await inbox()).toEqual(['A', 'B']);
    expect(database.t.notices.filter((notice) => /already a transaction in progress/.test(notice))).toEqual([]);
  });

  it.each([
    ['a configured meter provider whose instruments throw', () => configureTelemetry({ meterProvider: throwingMeterProvider as never })],
    ['a configured meter provider whose getMeter throws', () => configureTelemetry({ meterProvider: brokenMeterProvider as never })],
    ['a global meter provider whose instruments throw', () => metrics.setGlobalMeterProvider(throwingMeterProvider as never)],
    ['a global tracer provider whose startSpan throws', () => trace.setGlobalTracerProvider(startSpanThrows as never)],
    ['a global tracer provider whose spans throw on every call', () => trace.setGlobalTracerProvider(spansThrow as never)],
  ])('%s: a message is processed once, then a duplicate; the provider is reported once as a warning', async (_label, install) => {
    install();
    const process = withInbox(handler as never, database.options({ maxAttempts: 2 }));
    const outcomes = [];
    for (let attempt = 1; attempt <= 3; attempt++) outcomes.push((await process({ id: 'm1', payload: {}, attempt })).status);
    expect(outcomes).toEqual(['processed', 'duplicate', 'duplicate']);
    expect(await effects()).toEqual(['m1']);
    expect(warnings.filter((warning) => (warning as { code?: string }).code === 'INBOXED_TELEMETRY_FAILED').length).toBeLessThanOrEqual(1);
  });

  it('through an adapter call: per-message and batch processors settle every delivery with its real outcome under a throwing tracer and meter', async () => {
    trace.setGlobalTracerProvider(spansThrow as never);
    configureTelemetry({ meterProvider: throwingMeterProvider as never });
    const events = new ConsumerEventEmitter();
    const single = await callProcessor(
      withInbox(handler as never, database.options()),
      [
        { id: 's1', payload: {} },
        { id: 's2', payload: {} },
      ],
      undefined,
      events,
      'q',
    );
    const batch = await callProcessor(
      withInboxBatch(
        async (messages, tx) => {
          for (const message of messages) await (tx as any).insert(database.t.effects).values({ messageId: message.id });
        },
        database.options({ consumer: 'batch-consumer' }) as never,
      ),
      [
        { id: 'b1', payload: {} },
        { id: 'b2', payload: {} },
      ],
      undefined,
      events,
      'q',
    );
    expect([...single, ...batch].map((outcome) => outcome.status)).toEqual(['processed', 'processed', 'processed', 'processed']);
    expect(await effects()).toEqual(['b1', 'b2', 's1', 's2']);
  });
});
