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
});
