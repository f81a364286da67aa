import { describe, expect, it } from 'vitest';
import { backoffDelay } from './backoff.js';

describe('backoffDelay', () => {
  it('doubles from the base up to the cap', () => {
    const none = { baseDelayMs: 100, maxDelayMs: 1000, jitter: 'none' as const };
    expect([1, 2, 3, 4, 5, 6].map((a) => backoffDelay(a, none))).toEqual([100, 200, 400, 800, 1000, 1000]);
  });

  it('full jitter stays within [0, cap]; equal jitter within [cap/2, cap]', () => {
    expect(backoffDelay(3, { baseDelayMs: 100 }, () => 0)).toBe(0);
    expect(backoffDelay(3, { baseDelayMs: 100 }, () => 0.999999)).toBe(400);
    expect(backoffDelay(3, { baseDelayMs: 100, jitter: 'equal' }, () => 0)).toBe(200);
  });

  it('survives absurd attempt numbers', () => {
    expect(backoffDelay(10_000, { baseDelayMs: 1000, maxDelayMs: 60_000, jitter: 'none' })).toBe(60_000);
    expect(backoffDelay(0, { baseDelayMs: 1000, jitter: 'none' })).toBe(1000);
  });
});
