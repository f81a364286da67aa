import { describe, expect, it } from 'vitest';
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
