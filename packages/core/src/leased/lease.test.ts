import { describe, expect, it } from 'vitest';
import { InboxErrorCodes } from '../errors.js';
import type { AnyPgDatabase } from '../types.js';
import { Lease } from './lease.js';
import type { LeaseStore } from './lease-store.js';

/** A store whose renewals always succeed: the case where only the Lease itself can refuse. */
function renewingStore(): { store: LeaseStore; renewals: () => number } {
  let renewals = 0;
  const store = {
    renew: async () => {
      renewals++;
      return true;
    },
  } as unknown as LeaseStore;
  return { store, renewals: () => renewals };
}

describe('Lease', () => {
  it('refuses renewLease() once the attempt is over, without asking the database: a leftover heartbeat cannot keep a claim alive', async () => {
    const { store, renewals } = renewingStore();
    const lease = new Lease(store, {} as AnyPgDatabase, 'm', { token: 3, claimedAt: '2026-01-01T00:00:00.000000Z' }, 60_000, performance.now());
    await lease.renew();
    expect(renewals()).toBe(1);
    lease.dispose();
    await expect(lease.renew()).rejects.toMatchObject({ code: InboxErrorCodes.LEASE_LOST, details: { fencingToken: 3 } });
    expect(renewals()).toBe(1);
    expect(lease.lost).toBe(false); // the signal stays quiet: the attempt ended, it did not lose its lease
  });
});
