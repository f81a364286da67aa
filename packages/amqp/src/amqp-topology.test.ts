import { describe, expect, it } from 'vitest';
import { retryQueueName, retryTierFor } from './amqp-retry.js';
import { resolveTopology } from './amqp-topology.js';

describe('retry tiers and topology names', () => {
  it('rounds the wanted delay up to the nearest tier, capped at the largest', () => {
    const tiers = [1000, 5000, 30000];
    expect(retryTierFor(0, tiers)).toBe(1000);
    expect(retryTierFor(undefined, tiers)).toBe(1000);
    expect(retryTierFor(1000, tiers)).toBe(1000);
    expect(retryTierFor(1001, tiers)).toBe(5000);
    expect(retryTierFor(29_999, tiers)).toBe(30000);
    expect(retryTierFor(600_000, tiers)).toBe(30000);
  });

  it('sorts and deduplicates delays; dead-letters to <queue>.dead-letter by default', () => {
    const t = resolveTopology('orders', [5000, 1000, 5000], undefined);
    expect(t.retryDelaysMs).toEqual([1000, 5000]);
    expect(t.deadLetter).toEqual({ exchange: '', routingKey: 'orders.dead-letter', queue: 'orders.dead-letter' });
    expect(retryQueueName('orders', 1000)).toBe('orders.retry.1000');
    expect(resolveTopology('orders', undefined, { exchange: 'dlx' }).deadLetter).toEqual({ exchange: 'dlx', routingKey: 'orders' });
  });

  it('rejects invalid options at construction', () => {
    expect(() => resolveTopology('', undefined, undefined)).toThrow(/queue/);
    expect(() => resolveTopology('q', [], undefined)).toThrow(/retryDelaysMs/);
    expect(() => resolveTopology('q', [0], undefined)).toThrow(/retryDelaysMs/);
    expect(() => resolveTopology('q', [1.5], undefined)).toThrow(/retryDelaysMs/);
  });
});
