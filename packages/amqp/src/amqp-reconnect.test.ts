import { InboxError } from '@inboxed/core';
import { describe, expect, it } from 'vitest';
import { RateLimitedErrors } from './amqp-rate-limit.js';
import { ReconnectPacing } from './amqp-reconnect.js';

describe('ReconnectPacing', () => {
  const backoff = { baseDelayMs: 100, maxDelayMs: 1000, jitter: 'none' as const };

  it('continues the backoff across sessions that die young, capped, and starts over after a healthy one', () => {
    const pacing = new ReconnectPacing(backoff, 30_000);
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      pacing.lost(0, 50); // lived 50 ms
      delays.push(pacing.delayMs(1));
    }
    expect(delays).toEqual([200, 400, 800, 1000, 1000, 1000]);
    pacing.lost(0, 30_000); // consumed for the healthy period
    expect(pacing.delayMs(1)).toBe(100);
    expect(pacing.delayMs(3)).toBe(400); // failed attempts of one reconnect still grow as before
  });
});

describe('RateLimitedErrors', () => {
  it('reports the first at once, then at most once per interval per key, with the count since the last report', () => {
    let now = 0;
    const emitted: InboxError[] = [];
    const errors = new RateLimitedErrors(
      (e) => emitted.push(e),
      30_000,
      () => now,
    );
    const lost = () => new InboxError('AMQP_CONNECTION_LOST', 'channel closed', { details: { amqpCode: 404 } });
    errors.report('a', lost());
    for (let i = 0; i < 5; i++) errors.report('a', lost());
    errors.report('b', lost());
    expect(emitted).toHaveLength(2);
    now = 30_000;
    errors.report('a', lost());
    expect(emitted).toHaveLength(3);
    expect(emitted[2]!.code).toBe('AMQP_CONNECTION_LOST');
    expect(emitted[2]!.details).toMatchObject({ amqpCode: 404, retriesSinceLastReport: 6 });
  });
});
