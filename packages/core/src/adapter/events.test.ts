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
});
