import { databaseUrl, type TestDatabase } from '@inboxed/test-support';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from '../__tests__/migrated-database.js';
import { releaseMessage } from '../admin/repairs.js';
import { InboxErrorCodes } from '../errors.js';
import { purgeInbox } from '../retention.js';
import type { InboxMessage } from '../types.js';
import { withInbox } from '../with-inbox.js';
import type { LeasedHandlerContext } from './with-leased-inbox.js';

/** A promise with its resolve function, to hold a handler at a point the test chooses. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

/**
 * Leased mode's fence and its attempt count where claims, releases, purges and takeovers race, on
 * node-postgres (the tests hold row locks and end backends from a connection of their own). Every
 * count and row is read from the database. Each attempt must be counted exactly once, and a worker
 * whose claim ended must never complete.
 */
describe('leased mode: the fence and the attempt count under races (node-postgres)', () => {
  const database = useMigratedDatabase('node-postgres', { poolSize: 6 });
  let t: TestDatabase;
  let evidence: pg.Client;
  beforeEach(async () => {
    t = database.t;
    evidence = new pg.Client({ connectionString: databaseUrl() });
    await evidence.connect();
  });
  afterEach(async () => {
    await evidence.end();
  });
  const leased = (extra: Record<string, unknown> = {}) => ({ ...database.options(extra), mode: 'leased' as const });
  const q = async <T = Record<string, unknown>>(text: string): Promise<T[]> => (await evidence.query(text)).rows as T[];
  const inboxRow = async (id: string) =>
    (await q(`select status, fencing_token, lease_expires_at is not null as leased from "${t.schema}".inbox where message_id = '${id}'`))[0];
  const attemptsOf = async (id: string) =>
    (
      await q<{ attempts: number; last_error_code: string }>(`select attempts, last_error_code from "${t.schema}".inbox_attempts where message_id = '${id}'`)
    )[0];
  /** Holds the message's inbox row locked (as `inboxed release` or an inspection does) until `end()`. */
  const lockRow = async (id: string) => {
    const locker = new pg.Client({ connectionString: databaseUrl() });
    await locker.connect();
    await locker.query('begin');
    await locker.query(`select 1 from "${t.schema}".inbox where message_id = '${id}' for update`);
    return {
      end: async () => {
        await locker.query('commit');
        await locker.end();
      },
    };
  };
  /** The pid of this test's backend waiting on a lock with a statement containing `pattern`. */
  const waitingOn = async (pattern: string): Promise<number> => {
    for (let i = 0; i < 500; i++) {
      const [row] = await q<{ pid: number }>(
        `select pid from pg_stat_activity where query like '%"${t.schema}"."inbox"%' and query like '%${pattern}%'
           and wait_event_type = 'Lock' and pid <> pg_backend_pid()`,
      );
      if (row !== undefined) return row.pid;
      await sleep(10);
    }
    throw new Error(`no statement like ${pattern} waited on a lock`);
  };

  it('a claim purged by retention and claimed again from token 1: the stalled holder of the old claim cannot complete over the new owner', async () => {
    const slowEntered = gate();
    const finishSlow = gate();
    const fastEntered = gate();
    const finishFast = gate();
    const tokens: Record<string, number> = {};
    const handler = async (message: InboxMessage<{ who: string }>, context: LeasedHandlerContext) => {
      tokens[message.payload.who] = context.fencingToken;
      context.complete(async (tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id, value: { by: message.payload.who } });
      });
      if (message.payload.who === 'slow') {
        slowEntered.open();
        await finishSlow.opened; // stalls past its lease and the retention window, ignoring its signal
      } else {
        fastEntered.open();
        await finishFast.opened;
      }
    };
    const options = leased({ leaseMs: 200, fingerprint: false });
    const slow = withInbox<any, { who: string }>(handler, options)({ id: 'p1', payload: { who: 'slow' } });
    await slowEntered.opened;
    await sleep(400);
    expect((await purgeInbox(t.db, { olderThanMs: 100, tables: { schema: t.schema } })).deleted).toBe(1);
    const fast = withInbox<any, { who: string }>(handler, options)({ id: 'p1', payload: { who: 'fast' } });
    await fastEntered.opened;
    expect(tokens).toEqual({ slow: 1, fast: 1 }); // the token starts again: it alone cannot tell the claims apart
    finishSlow.open();
    expect(await slow).toMatchObject({ status: 'retry', reason: 'lease-lost' });
    finishFast.open();
    expect(await fast).toMatchObject({ status: 'processed', fencingToken: 1 });
    expect(await q(`select value from "${t.schema}".effects where message_id = 'p1'`)).toEqual([{ value: { by: 'fast' } }]);
    expect(await inboxRow('p1')).toMatchObject({ status: 'processed', fencing_token: 1, leased: false });
  });

  it('a takeover waiting on the row while the overrun worker gives it back: that failure is counted once, by its worker, and the claim is not a takeover', async () => {
    const entered = gate();
    const proceed = gate();
    const handler = async (message: InboxMessage<{ who: string }>) => {
      if (message.payload.who === 'slow') {
        entered.open();
        await proceed.opened;
        throw new Error('provider answered 500 after the lease ran out');
      }
    };
    const options = leased({ leaseMs: 200, maxAttempts: 5, fingerprint: false });
    const slow = withInbox<any, { who: string }>(handler, options)({ id: 'r1', payload: { who: 'slow' } });
    await entered.opened;
    await sleep(350); // the lease ran out
    // The release queues on the lock first, the next copy's claim behind it: the claim's snapshot
    // still shows the expired lease when the release commits.
    const lock = await lockRow('r1');
    let fast: Promise<any>;
    try {
      proceed.open();
      await waitingOn('set lease_expires_at = null');
      fast = withInbox<any, { who: string }>(handler, options)({ id: 'r1', payload: { who: 'fast' } });
      await waitingOn('with prior as');
    } finally {
      await lock.end();
    }
    const [slowOutcome, fastOutcome] = await Promise.all([slow, fast!]);
    expect(slowOutcome).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(fastOutcome).toMatchObject({ status: 'processed', fencingToken: 2, takeover: false });
    expect(await attemptsOf('r1')).toMatchObject({ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_FAILED });
  });

  it('a failed attempt whose give-back-and-count loses its connection is an outage: nothing counted, and a second try gives the claim back', async () => {
    const entered = gate();
    const proceed = gate();
    let runs = 0;
    const handler = async () => {
      runs++;
      if (runs === 1) {
        entered.open();
        await proceed.opened;
      }
      throw new Error('provider answered 500');
    };
    const process = withInbox(handler, leased({ leaseMs: 60_000, maxAttempts: 2 }));
    const first = process({ id: 'b1', payload: {} });
    await entered.opened;
    const lock = await lockRow('b1');
    try {
      proceed.open();
      const pid = await waitingOn('set lease_expires_at = null');
      await q(`select pg_terminate_backend(${pid})`);
    } finally {
      await lock.end();
    }
    expect(await first).toMatchObject({ status: 'retry', reason: 'database-unavailable', error: { code: InboxErrorCodes.DATABASE_UNAVAILABLE } });
    expect(await attemptsOf('b1')).toBeUndefined();
    expect(await inboxRow('b1')).toMatchObject({ status: 'processing', leased: false }); // given back: no lease to wait out
    // Not a takeover (nothing counted for a death): the handler runs again and that failure is the first counted.
    const second = await process({ id: 'b1', payload: {} });
    expect(runs).toBe(2);
    expect(second).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1, takeover: false });
    expect(await attemptsOf('b1')).toMatchObject({ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_FAILED });
  });

  it('a give-back refused for a reason other than an outage says so: inbox tables changed under the consumer are INBOX_TABLE_MISSING, not DATABASE_UNAVAILABLE', async () => {
    // The handler fails while a migration renames a column the give-back and the count both use.
    const process = withInbox(
      async () => {
        await q(`alter table "${t.schema}".inbox rename column fencing_token to fencing_token_old`);
        throw new Error('provider answered 500');
      },
      leased({ leaseMs: 60_000 }),
    );
    const outcome = await process({ id: 'm1', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', error: { code: InboxErrorCodes.INBOX_TABLE_MISSING } });
    await q(`alter table "${t.schema}".inbox rename column fencing_token_old to fencing_token`);
    // Nothing was counted and the claim is still held: its lease runs out and the takeover counts it.
    expect(await attemptsOf('m1')).toBeUndefined();
    expect(await inboxRow('m1')).toMatchObject({ status: 'processing', leased: true });
  });

  it('the spent-budget stop counts no attempt of its own: attempts stay at maxAttempts', async () => {
    const hold = gate();
    let runs = 0;
    const hangs = async () => {
      runs++;
      await hold.opened;
    };
    const options = leased({ leaseMs: 150, maxAttempts: 1 });
    const dead = withInbox(hangs, options)({ id: 'd1', payload: {} });
    await sleep(300);
    const last = await withInbox(hangs, options)({ id: 'd1', payload: {} });
    hold.open();
    await dead;
    expect(runs).toBe(1);
    expect(last).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded', attempt: 1 });
    // The record's last error is the stop's own ("the handler was not run again"), its count the death's.
    expect(await attemptsOf('d1')).toMatchObject({ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_FAILED });
  });

  it('an operator release of a hung holder gives a fresh budget: with maxAttempts 1 the next delivery runs the handler', async () => {
    const entered = gate();
    const hang = gate();
    let runs = 0;
    const handler = async () => {
      runs++;
      if (runs === 1) {
        entered.open();
        await hang.opened;
      }
    };
    const options = leased({ leaseMs: 60_000, maxAttempts: 1 });
    const hung = withInbox(handler, options)({ id: 'g1', payload: {} });
    await entered.opened;
    await releaseMessage(t.db, { schema: t.schema }, 'c', 'g1', { actor: 'ops', reason: 'host lost' });
    expect(await withInbox(handler, options)({ id: 'g1', payload: {} })).toMatchObject({ status: 'processed', fencingToken: 3, takeover: false });
    hang.open();
    expect(await hung).toMatchObject({ status: 'retry', reason: 'lease-lost' });
    expect(runs).toBe(2);
    expect(await attemptsOf('g1')).toBeUndefined();
  });
});
