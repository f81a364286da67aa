import { describe, expect, it } from 'vitest';
import { InboxError } from '../errors.js';
import type { InboxOutcome } from '../types.js';
import { ConsumerEventEmitter, INFRASTRUCTURE_ERROR_INTERVAL_MS } from './events.js';

const retry = (reason: string, code = 'DATABASE_UNAVAILABLE'): InboxOutcome => ({
  status: 'retry',
  messageId: 'm',
  consumer: 'c',
  reason,
  retryAfterMs: 1,
  error: new InboxError(code, 'database unavailable: ECONNREFUSED'),
});

describe('ConsumerEventEmitter', () => {
  it('turns infrastructure retries into error events: the first at once, then one per interval per reason with a count', () => {
    let now = 0;
    const events = new ConsumerEventEmitter(undefined, () => now);
    const errors: InboxError[] = [];
    events.on('error', (error) => errors.push(error));
    for (let i = 0; i < 5; i++) events.emitOutcome(retry('database-unavailable'), new Date(0));
    events.emitOutcome(retry('inbox-table-missing', 'INBOX_TABLE_MISSING'), new Date(0));
    expect(errors.map((e) => [e.code, e.details.retriesSinceLastReport])).toEqual([
      ['DATABASE_UNAVAILABLE', 1],
      ['INBOX_TABLE_MISSING', 1],
    ]);
    now += INFRASTRUCTURE_ERROR_INTERVAL_MS;
    events.emitOutcome(retry('database-unavailable'), new Date(0));
    expect(errors.map((e) => [e.code, e.details.retriesSinceLastReport])).toEqual([
      ['DATABASE_UNAVAILABLE', 1],
      ['INBOX_TABLE_MISSING', 1],
      ['DATABASE_UNAVAILABLE', 5],
    ]);
    expect(errors[2]!.message).toMatch(/^5 deliveries retried \(database-unavailable\)/);
  });

  it("does not raise errors for the message's own retries (handler failures, a busy copy)", () => {
    const events = new ConsumerEventEmitter();
    const errors: InboxError[] = [];
    events.on('error', (error) => errors.push(error));
    events.emitOutcome(retry('handler-failed', 'HANDLER_FAILED'), new Date(0));
    events.emitOutcome(retry('in-progress', 'LOCK_TIMEOUT'), new Date(0));
    expect(errors).toEqual([]);
  });

  it('paces a recurring error: the first at once as it is, then at most once per interval per key, with the count since the last report', () => {
    let now = 0;
    const events = new ConsumerEventEmitter(undefined, () => now);
    const emitted: InboxError[] = [];
    events.on('error', (e) => emitted.push(e));
    const lost = () => new InboxError('AMQP_CONNECTION_LOST', 'channel closed', { details: { amqpCode: 404 } });
    events.reportRecurring('a', lost());
    for (let i = 0; i < 5; i++) events.reportRecurring('a', lost());
    events.reportRecurring('b', lost());
    expect(emitted).toHaveLength(2);
    expect(emitted[0]!.message).toBe('channel closed');
    now = INFRASTRUCTURE_ERROR_INTERVAL_MS;
    events.reportRecurring('a', lost());
    expect(emitted).toHaveLength(3);
    expect(emitted[2]!.code).toBe('AMQP_CONNECTION_LOST');
    expect(emitted[2]!.details).toMatchObject({ amqpCode: 404, retriesSinceLastReport: 6 });
  });

  it('calls every listener on its own: one that throws, or an async one that rejects, is logged and the others still hear the event', async () => {
    const logged: string[] = [];
    const logger = { debug() {}, info() {}, warn() {}, error: (_fields: unknown, message?: string) => logged.push(message ?? '') };
    const events = new ConsumerEventEmitter(logger);
    const heard: string[] = [];
    events.on('started', () => {
      throw new Error('sync listener failure');
    });
    events.on('started', async () => {
      throw new Error('async listener failure');
    });
    events.on('started', () => heard.push('third'));
    events.emit('started');
    await new Promise((resolve) => setImmediate(resolve));
    expect(heard).toEqual(['third']);
    expect(logged).toEqual(['a "started" listener threw: Error: sync listener failure', 'a "started" listener threw: Error: async listener failure']);
  });

  it('a logger whose methods throw or reject never reaches the adapter; error lines fall back to stderr', async () => {
    const written: string[] = [];
    const write = process.stderr.write;
    process.stderr.write = ((chunk: string) => written.push(String(chunk)) > 0) as unknown as typeof process.stderr.write;
    try {
      const logger = {
        debug: () => Promise.reject(new Error('debug rejected')),
        info: () => {
          throw new Error('info threw');
        },
        warn: () => {
          throw new Error('warn threw');
        },
        error: () => {
          throw new Error('error threw');
        },
      };
      const events = new ConsumerEventEmitter(logger as never);
      expect(() => {
        events.logger.info({}, 'started');
        events.emitOutcome({ status: 'processed', messageId: 'm', consumer: 'c' }, new Date(0));
        events.emit('error', new InboxError('DATABASE_UNAVAILABLE', 'no database'));
      }).not.toThrow();
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.stderr.write = write;
    }
    expect(written.filter((line) => line.includes("the logger's")).length).toBe(1);
    expect(written.some((line) => line.includes('consumer error') && line.includes('no database'))).toBe(true);
  });
});
