import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { useMigratedDatabase } from '../__tests__/migrated-database.js';
import { InboxErrorCodes } from '../errors.js';
import { storeResult } from '../stored-result.js';
import { PermanentError } from '../errors.js';
import { reject, type InboxMessage, type InboxOutcome } from '../types.js';
import { withInbox } from '../with-inbox.js';
import { withInboxBatch } from '../with-inbox-batch.js';
import { releaseMessage } from '../admin/repairs.js';
import { inspectLeases } from './lease-report.js';
import type { LeasedHandlerContext } from './with-leased-inbox.js';

const UUID_V8 = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** A promise with its resolve function, to hold a handler at a point the test chooses. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

describe.each(DRIVERS)('leased mode on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 6 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const leased = (extra: Record<string, unknown> = {}) => ({ ...database.options(extra), mode: 'leased' as const });
  const row = async (id: string) =>
    (
      await t.query<{ status: string; fencing_token: number; leased: boolean; result: string | null; reason: string | null }>(
        `select status, fencing_token, lease_expires_at is not null as leased, result, reason from "${t.schema}".inbox where message_id = '${id}'`,
      )
    )[0];
  const attempts = async (id: string) =>
    (
      await t.query<{ attempts: number; last_error_code: string }>(
        `select attempts, last_error_code from "${t.schema}".inbox_attempts where message_id = '${id}'`,
      )
    )[0];

  it('claims, runs the handler outside a transaction, completes with the stored result; a redelivery is a duplicate carrying it', async () => {
    const contexts: LeasedHandlerContext[] = [];
    const process = withInbox(async (message: InboxMessage, context) => {
      contexts.push(context);
      // A claim is committed before the handler runs: another connection sees it.
      expect(await row(message.id)).toMatchObject({ status: 'processing', fencing_token: 1, leased: true });
      context.complete(async (tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
      });
      return storeResult({ chargeId: 'ch_1', amount: 42 });
    }, leased());
    const first = await process({ id: 'm1', payload: { amount: 42 } });
    expect(first).toMatchObject({ status: 'processed', fencingToken: 1, takeover: false, result: { chargeId: 'ch_1', amount: 42 } });
    expect(contexts[0]).toMatchObject({ consumer: 'c', attempt: 1, fencingToken: 1, takeover: false });
    expect(contexts[0]!.idempotencyKey).toMatch(UUID_V8);
    expect(await row('m1')).toMatchObject({ status: 'processed', fencing_token: 1, leased: false });
    expect(await t.countEffects('m1')).toBe(1);

    const again = await process({ id: 'm1', payload: { amount: 42 } });
    expect(again).toMatchObject({ status: 'duplicate', result: { chargeId: 'ch_1', amount: 42 } });
    expect(contexts).toHaveLength(1);
    expect(await t.countEffects('m1')).toBe(1);
  });

  it('inspectLeases() reports live, expired and released claims and the oldest one, by server time', async () => {
    const tables = { schema: t.schema };
    expect(await inspectLeases(t.db, { tables })).toEqual({ live: 0, expired: 0, released: 0, oldestAgeMs: null });
    const hold = gate();
    const entered = gate();
    const process = withInbox(
      async (message: InboxMessage) => {
        if (message.id === 'fails') throw new Error('released after this');
        entered.open();
        await hold.opened;
      },
      leased({ leaseMs: 5_000 }),
    );
    await t.query(
      `insert into "${t.schema}".inbox (consumer, message_id, status, lease_expires_at, completed_at) values ('c', 'crashed', 'processing', now() - interval '1 minute', now() - interval '2 minutes')`,
    );
    await process({ id: 'fails', payload: {} });
    const running = process({ id: 'live', payload: {} });
    await entered.opened;
    const report = await inspectLeases(t.db, { tables, consumer: 'c' });
    expect(report).toMatchObject({ live: 1, expired: 1, released: 1 });
    expect(report.oldestAgeMs).toBeGreaterThanOrEqual(119_000);
    expect(await inspectLeases(t.db, { tables, consumer: 'someone-else' })).toMatchObject({ live: 0, expired: 0, released: 0 });
    hold.open();
    await running;
  });

  it('a live lease makes another copy busy, with the time left on it; once completed, the copy is a duplicate', async () => {
    const hold = gate();
    const entered = gate();
    let runs = 0;
    const process = withInbox(
      async () => {
        runs++;
        entered.open();
        await hold.opened;
      },
      leased({ leaseMs: 5_000 }),
    );
    const first = process({ id: 'm2', payload: {} });
    await entered.opened;
    const copy = await process({ id: 'm2', payload: {} });
    expect(copy).toMatchObject({ status: 'busy', reason: 'lease-held' });
    expect(copy.status === 'busy' && copy.retryAfterMs).toBeGreaterThan(3_000);
    expect(copy.status === 'busy' && copy.retryAfterMs).toBeLessThanOrEqual(5_000);
    expect(copy.error?.code).toBe(InboxErrorCodes.LEASE_HELD);
    hold.open();
    expect(await first).toMatchObject({ status: 'processed' });
    expect(await process({ id: 'm2', payload: {} })).toMatchObject({ status: 'duplicate' });
    expect(runs).toBe(1);
    expect(await attempts('m2')).toBeUndefined(); // busy never counts
  });

  it('lease expiry during a slow handler: a second worker takes over with a higher token; the first one is fenced off, the stored result is the second one', async () => {
    const slowEntered = gate();
    const finishSlow = gate();
    const seen: { token: number; takeover: boolean; key: string; aborted: () => boolean }[] = [];
    const handler = async (message: InboxMessage<{ who: string }>, context: LeasedHandlerContext) => {
      seen.push({ token: context.fencingToken, takeover: context.takeover, key: context.idempotencyKey, aborted: () => context.signal.aborted });
      context.complete(async (tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id, value: { by: message.payload.who } });
      });
      if (message.payload.who === 'slow') {
        slowEntered.open();
        await finishSlow.opened; // ignores its signal: keeps going past the lease
      }
      return storeResult({ by: message.payload.who });
    };
    // Two processors: two workers (the same consumer), as two processes would have.
    const slowWorker = withInbox<any, { who: string }>(handler, leased({ leaseMs: 300, fingerprint: false }));
    const fastWorker = withInbox<any, { who: string }>(handler, leased({ leaseMs: 300, fingerprint: false }));
    const slow = slowWorker({ id: 'm3', payload: { who: 'slow' } });
    await slowEntered.opened;
    await sleep(450); // the lease (300 ms, server time) runs out
    expect(seen[0]!.aborted()).toBe(true); // the slow handler was told

    const takeover = await fastWorker({ id: 'm3', payload: { who: 'fast' } });
    expect(takeover).toMatchObject({ status: 'processed', fencingToken: 2, takeover: true, result: { by: 'fast' } });
    expect(seen[1]).toMatchObject({ token: 2, takeover: true, key: seen[0]!.key });

    finishSlow.open();
    const late = await slow;
    expect(late).toMatchObject({ status: 'retry', fencingToken: 1 });
    expect(late.error?.code).toBe(InboxErrorCodes.LEASE_LOST);
    // The fence kept the second worker's completion, result and local writes; none of the first's.
    expect(await row('m3')).toMatchObject({ status: 'processed', fencing_token: 2, result: '{"by":"fast"}' });
    expect(await t.query(`select value from "${t.schema}".effects where message_id = 'm3'`)).toEqual([{ value: { by: 'fast' } }]);
    expect(await slowWorker({ id: 'm3', payload: { who: 'slow' } })).toMatchObject({ status: 'duplicate', result: { by: 'fast' } });
  });

  it("an overrunning worker at maxAttempts whose claim was taken over is counted once, by the takeover, and not dead-lettered: the message is its new owner's to finish", async () => {
    const slowEntered = gate();
    const finishSlow = gate();
    const fastEntered = gate();
    const finishFast = gate();
    const handler = async (message: InboxMessage<{ who: string }>, context: LeasedHandlerContext) => {
      context.complete(async (tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id, value: { by: message.payload.who } });
      });
      if (message.payload.who === 'slow') {
        slowEntered.open();
        await finishSlow.opened; // ignores its signal: keeps going past the lease
      } else {
        fastEntered.open();
        await finishFast.opened;
      }
    };
    // The takeover counts the overrun attempt (1 of 2), so the new owner still has one to run.
    const options = leased({ leaseMs: 300, fingerprint: false, maxAttempts: 2 });
    const slow = withInbox<any, { who: string }>(handler, options)({ id: 'over', payload: { who: 'slow' } });
    await slowEntered.opened;
    await sleep(450); // the lease runs out; a redelivered copy takes the claim over and is still at work
    const fast = withInbox<any, { who: string }>(handler, options)({ id: 'over', payload: { who: 'fast' } });
    await fastEntered.opened;
    finishSlow.open();
    expect(await slow).toMatchObject({ status: 'retry', reason: 'lease-lost', fencingToken: 1 });
    // Counted once: by the takeover, not again here; its error stays the takeover's.
    expect(await attempts('over')).toMatchObject({ attempts: 1, last_error_code: 'ATTEMPT_UNFINISHED' });
    finishFast.open();
    expect(await fast).toMatchObject({ status: 'processed', fencingToken: 2, takeover: true });
    expect(await t.query(`select value from "${t.schema}".effects where message_id = 'over'`)).toEqual([{ value: { by: 'fast' } }]);
    expect(await t.query(`select message_id from "${t.schema}".inbox_dead_letters`)).toEqual([]);
  });

  it('a message whose workers die (their leases run out, they never report): each takeover counts one, and the budget ends it dead-lettered', async () => {
    const release = gate();
    let runs = 0;
    const dies = async () => {
      runs++;
      await release.opened; // a dead worker: it never returns while the test looks
    };
    const options = leased({ leaseMs: 150, maxAttempts: 2 });
    const dead = [withInbox(dies, options)({ id: 'kills', payload: {} })];
    await sleep(300);
    dead.push(withInbox(dies, options)({ id: 'kills', payload: {} })); // takes over: 1 counted
    await sleep(300);
    expect(await attempts('kills')).toMatchObject({ attempts: 1, last_error_code: 'ATTEMPT_UNFINISHED' });
    const last = await withInbox(dies, options)({ id: 'kills', payload: {} }); // takes over: 2 counted, the budget is spent
    expect(last).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded', fencingToken: 3, takeover: true });
    expect(runs).toBe(2);
    release.open();
    // Finishing late, the overtaken workers are fenced off and add nothing: their takeovers counted them.
    for (const outcome of await Promise.all(dead)) expect(outcome).toMatchObject({ status: 'retry', reason: 'lease-lost' });
    expect(await t.query(`select count(*)::int as n from "${t.schema}".effects`)).toEqual([{ n: 0 }]);
  });

  it('a first claim runs the handler whatever attempts another processor counted; only a message claimed before stops at a spent budget', async () => {
    // Attempts left by a transactional processor of the same consumer (its failures write no inbox row).
    await t.query(`insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts) values ('c', 'counted-elsewhere', 3)`);
    let runs = 0;
    const process = withInbox(
      async () => {
        runs++;
      },
      leased({ maxAttempts: 2 }),
    );
    expect(await process({ id: 'counted-elsewhere', payload: {} })).toMatchObject({ status: 'processed', fencingToken: 1 });
    expect(runs).toBe(1);
  });

  it('renewLease() keeps a long handler past leaseMs: copies meanwhile are busy, and it completes', async () => {
    const entered = gate();
    const process = withInbox(
      async (_m: InboxMessage, context) => {
        entered.open();
        // Renewals at a fifth of the lease: a loaded CI machine may delay one by a few hundred ms.
        for (let i = 0; i < 6; i++) {
          await sleep(200);
          await context.renewLease();
        }
        expect(context.signal.aborted).toBe(false);
      },
      leased({ leaseMs: 1_000 }),
    );
    const long = process({ id: 'm4', payload: {} });
    await entered.opened;
    await sleep(1_100); // past the first lease: only renewals keep it
    expect(await process({ id: 'm4', payload: {} })).toMatchObject({ status: 'busy' });
    expect(await long).toMatchObject({ status: 'processed', fencingToken: 1 });
  });

  it('the signal fires on lease loss; the attempt is counted (LEASE_LOST) and released, so the next delivery claims at once without takeover', async () => {
    let reason: unknown;
    const tokens: number[] = [];
    let fail = true;
    const process = withInbox(
      async (_m: InboxMessage, context) => {
        tokens.push(context.fencingToken);
        if (!fail) return;
        await new Promise<void>((resolve) => context.signal.addEventListener('abort', () => resolve(), { once: true }));
        reason = context.signal.reason;
        await expect(context.renewLease()).rejects.toMatchObject({ code: InboxErrorCodes.LEASE_LOST });
        throw context.signal.reason;
      },
      leased({ leaseMs: 150 }),
    );
    const lost = await process({ id: 'm5', payload: {} });
    expect(reason).toMatchObject({ code: InboxErrorCodes.LEASE_LOST });
    expect(lost).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(lost.error?.code).toBe(InboxErrorCodes.LEASE_LOST);
    expect(await attempts('m5')).toMatchObject({ attempts: 1, last_error_code: InboxErrorCodes.LEASE_LOST });
    expect(await row('m5')).toMatchObject({ status: 'processing', leased: false, fencing_token: 1 });
    fail = false;
    expect(await process({ id: 'm5', payload: {} })).toMatchObject({ status: 'processed', fencingToken: 2, takeover: false });
    expect(tokens).toEqual([1, 2]);
  });

  it("a handler that fails on the consumer's stop gives its claim back uncounted: the next delivery claims it at once, its budget whole", async () => {
    const tokens: number[] = [];
    let fail = true;
    const process = withInbox(
      async (_m: InboxMessage, context) => {
        tokens.push(context.fencingToken);
        if (fail) await sleep(10_000, undefined, { signal: context.signal });
      },
      leased({ maxAttempts: 1 }),
    );
    const stop = new AbortController();
    const stopped = process({ id: 'm6', payload: {} }, { signal: stop.signal });
    await sleep(100);
    stop.abort();
    expect(await stopped).toMatchObject({ status: 'retry', reason: 'consumer-stopping', error: { code: InboxErrorCodes.CONSUMER_STOPPING } });
    expect(await attempts('m6')).toBeUndefined();
    expect(await row('m6')).toMatchObject({ status: 'processing', leased: false, fencing_token: 1 });
    fail = false;
    expect(await process({ id: 'm6', payload: {} })).toMatchObject({ status: 'processed', fencingToken: 2, takeover: false });
    expect(tokens).toEqual([1, 2]);
  });

  it('an operator release revokes a live claim: the holder cannot renew it back, its completion is fenced off, the next delivery claims it with no attempt counted', async () => {
    const entered = gate();
    const released = gate();
    let renewal: unknown;
    const handler = async (message: InboxMessage<{ who: string }>, context: LeasedHandlerContext) => {
      context.complete(async (tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id, value: { by: message.payload.who } });
      });
      if (message.payload.who === 'stuck') {
        entered.open();
        await released.opened;
        // Alive after all: the renewal that used to take the claim back is refused.
        renewal = await context.renewLease().catch((error: unknown) => error);
      }
      return storeResult({ by: message.payload.who });
    };
    const holder = withInbox<any, { who: string }>(handler, leased({ leaseMs: 60_000, fingerprint: false }));
    const next = withInbox<any, { who: string }>(handler, leased({ leaseMs: 60_000, fingerprint: false }));
    const stuck = holder({ id: 'm9', payload: { who: 'stuck' } });
    await entered.opened;
    await releaseMessage(t.db, { schema: t.schema }, 'c', 'm9', { actor: 'ops', reason: 'holder looks hung' });
    expect(await row('m9')).toMatchObject({ status: 'processing', fencing_token: 2 });
    released.open();
    const late = await stuck;
    expect(renewal).toMatchObject({ code: InboxErrorCodes.LEASE_LOST });
    expect(late).toMatchObject({ status: 'retry', fencingToken: 1 });
    expect(late.error?.code).toBe(InboxErrorCodes.LEASE_LOST);
    expect(await t.countEffects('m9')).toBe(0);
    // The revoked claim was given back: the next delivery claims it at once, counting no attempt
    // against the fresh budget (not a takeover of a worker that died).
    const claimedNext = await next({ id: 'm9', payload: { who: 'next' } });
    expect(claimedNext).toMatchObject({ status: 'processed', fencingToken: 3, takeover: false, result: { by: 'next' } });
    expect(await t.query(`select 1 from "${t.schema}".inbox_attempts where message_id = 'm9'`)).toEqual([]);
    expect(await t.query(`select value from "${t.schema}".effects where message_id = 'm9'`)).toEqual([{ value: { by: 'next' } }]);
  });

  it('failures count as in transactional mode: retry, then dead-letter at maxAttempts; the idempotency key stays the same across attempts and processors', async () => {
    const keys: string[] = [];
    const handler = async (_m: InboxMessage, context: LeasedHandlerContext) => {
      keys.push(context.idempotencyKey);
      throw new Error('provider said 503');
    };
    const outcomes: InboxOutcome[] = [];
    for (let i = 0; i < 3; i++) outcomes.push(await withInbox(handler, leased({ maxAttempts: 3 }))({ id: 'm6', payload: {} }));
    expect(outcomes.map((o) => o.status)).toEqual(['retry', 'retry', 'dead-letter']);
    expect(outcomes[2]).toMatchObject({ reason: 'max-attempts-exceeded', attempt: 3, fencingToken: 3 });
    expect(new Set(keys).size).toBe(1);
    expect(keys[0]).toMatch(UUID_V8);
    expect(await withInbox(handler, leased())({ id: 'other', payload: {} }).then(() => keys.at(-1))).not.toBe(keys[0]);

    const permanent = await withInbox(async () => {
      throw new PermanentError('card declined for good');
    }, leased())({ id: 'm7', payload: {} });
    expect(permanent).toMatchObject({ status: 'dead-letter', reason: 'permanent-failure' });
    expect(await row('m7')).toMatchObject({ status: 'processing', leased: false }); // released: a replay claims it again
  });

  it('reject() is recorded fenced; the payload fingerprint decides conflicts as in transactional mode, also against an open claim', async () => {
    const hold = gate();
    const entered = gate();
    const process = withInbox<any, { n: number }>(async (message) => {
      if (message.id === 'held') {
        entered.open();
        await hold.opened;
      }
      return message.payload.n < 0 ? reject('negative amount') : undefined;
    }, leased());
    expect(await process({ id: 'r1', payload: { n: -1 } })).toMatchObject({ status: 'rejected', reason: 'negative amount' });
    expect(await process({ id: 'r1', payload: { n: -1 } })).toMatchObject({ status: 'duplicate', reason: 'negative amount' });
    expect(await process({ id: 'r1', payload: { n: 2 } })).toMatchObject({ status: 'conflict', reason: 'payload-mismatch' });

    const open = process({ id: 'held', payload: { n: 1 } });
    await entered.opened;
    expect(await process({ id: 'held', payload: { n: 9 } })).toMatchObject({ status: 'conflict', reason: 'payload-mismatch' });
    hold.open();
    expect(await open).toMatchObject({ status: 'processed' });
  });

  it('a returned value that throws when read is a counted handler failure that gives the claim back, never an uncounted loop', async () => {
    // A look-alike whose `kind` getter throws, and a stored result whose JSON is not text.
    const hostile = [
      Object.defineProperty({}, 'kind', {
        get() {
          throw new Error('hostile getter');
        },
      }),
      { kind: 'inboxed.result', json: 42 },
    ];
    for (const [n, returned] of hostile.entries()) {
      const id = `hostile-return-${n}`;
      const process = withInbox(async () => returned as never, leased({ maxAttempts: 2 }));
      expect(await process({ id, payload: {} })).toMatchObject({ status: 'retry', reason: 'handler-failed', fencingToken: 1 });
      expect(await attempts(id)).toMatchObject({ attempts: 1 });
      expect(await row(id)).toMatchObject({ status: 'processing', fencing_token: 1, leased: false }); // released, not left leased
      expect(await process({ id, payload: {} })).toMatchObject({ status: 'dead-letter', fencingToken: 2 });
      expect(await attempts(id)).toMatchObject({ attempts: 2 });
    }
    // A reason with no text form (String() throws) is still the handler's rejection, recorded as one.
    const rejecting = withInbox(async () => reject(Object.create(null)), leased());
    expect(await rejecting({ id: 'textless-reason', payload: {} })).toMatchObject({ status: 'rejected', reason: 'rejected (the reason has no text form)' });
    expect(await row('textless-reason')).toMatchObject({ status: 'rejected', reason: 'rejected (the reason has no text form)' });
  });

  it('renewLease() refuses once the attempt is over, so a heartbeat left running cannot keep a claim alive', async () => {
    let renew: (() => Promise<void>) | undefined;
    const completes = withInbox(async (_message: InboxMessage, context) => {
      renew = () => context.renewLease();
    }, leased());
    expect(await completes({ id: 'late-renew', payload: {} })).toMatchObject({ status: 'processed' });
    await expect(renew!()).rejects.toMatchObject({ code: InboxErrorCodes.LEASE_LOST });

    const fails = withInbox(async (_message: InboxMessage, context) => {
      renew = () => context.renewLease();
      throw new Error('fails, leaving its heartbeat behind');
    }, leased());
    expect(await fails({ id: 'late-renew-failed', payload: {} })).toMatchObject({ status: 'retry' });
    await expect(renew!()).rejects.toMatchObject({ code: InboxErrorCodes.LEASE_LOST });
    expect(await row('late-renew-failed')).toMatchObject({ status: 'processing', leased: false });
    // Released, not renewed: the next delivery claims it at once.
    expect(await fails({ id: 'late-renew-failed', payload: {} })).toMatchObject({ status: 'retry', fencingToken: 2 });
  });

  it('a completion whose local writes swallow a failed statement commits nothing: a counted TRANSACTION_ABORTED, the claim released', async () => {
    const process = withInbox(async (message: InboxMessage, context) => {
      context.complete(async (tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        await tx.execute('select 1/0').catch(() => {});
      });
    }, leased());
    const outcome = await process({ id: 'm8', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.TRANSACTION_ABORTED);
    expect(await t.countEffects('m8')).toBe(0);
    expect(await row('m8')).toMatchObject({ status: 'processing', leased: false });
  });

  it('a completion that never settles is held to handlerTimeoutMs like the handler: a counted HANDLER_TIMEOUT, nothing committed, the claim released', async () => {
    const process = withInbox(
      async (message: InboxMessage, context) => {
        context.complete(async (tx: any) => {
          await tx.insert(t.effects).values({ messageId: message.id });
          await new Promise(() => {}); // ignores every signal
        });
      },
      leased({ handlerTimeoutMs: 100 }),
    );
    const outcome = await process({ id: 'm9', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
    expect(await t.countEffects('m9')).toBe(0);
    expect(await row('m9')).toMatchObject({ status: 'processing', leased: false });
    expect(await attempts('m9')).toMatchObject({ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_TIMEOUT });
  });

  it('savepoints side by side in a completion are refused as in transactional mode (OVERLAPPING_SAVEPOINTS): none of it commits', async () => {
    let first: unknown;
    const process = withInbox(async (message: InboxMessage, context) => {
      context.complete(async (tx: any) => {
        const running = tx.transaction(async (savepoint: any) => {
          await savepoint.insert(t.effects).values({ messageId: message.id, value: 'first, 1' });
          await sleep(30);
          await savepoint.insert(t.effects).values({ messageId: message.id, value: 'first, 2' });
        });
        // Would roll back the first one's second write, which then reports success.
        await tx.transaction((savepoint: any) => savepoint.insert(t.effects).values({ messageId: message.id, value: 'second' })).catch(() => {});
        first = await running.then(() => 'ok');
      });
    }, leased());
    const outcome = await process({ id: 'm10', payload: {} });
    expect(first).toBe('ok');
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.OVERLAPPING_SAVEPOINTS);
    expect(await t.countEffects('m10')).toBe(0);
  });

  it('a transactional processor meeting a leased claim: busy while it is live, dead-lettered (mode-mismatch) once released', async () => {
    const hold = gate();
    const entered = gate();
    const leasedProcess = withInbox(
      async (_m: InboxMessage) => {
        entered.open();
        await hold.opened;
        throw new Error('fails once');
      },
      leased({ leaseMs: 5_000 }),
    );
    const transactional = withInbox(async () => {}, database.options());
    const running = leasedProcess({ id: 'm9', payload: {} });
    await entered.opened;
    expect(await transactional({ id: 'm9', payload: {} })).toMatchObject({ status: 'busy', reason: 'lease-held' });
    hold.open();
    expect(await running).toMatchObject({ status: 'retry' });
    expect(await transactional({ id: 'm9', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'mode-mismatch' });
  });

  it('transactional mode stores a result too, replayed on duplicates; a value with no JSON form is a counted INVALID_RESULT', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      return storeResult({ orderNo: 7, note: 'nul \u0000 and lone \ud800 survive' });
    }, database.options());
    expect(await process({ id: 't1', payload: {} })).toMatchObject({ status: 'processed', result: { orderNo: 7 } });
    expect(await process({ id: 't1', payload: {} })).toMatchObject({ status: 'duplicate', result: { orderNo: 7, note: 'nul \u0000 and lone \ud800 survive' } });
    const bad = await withInbox(async () => storeResult({ big: 1n }), database.options())({ id: 't2', payload: {} });
    expect(bad).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(bad.error?.code).toBe(InboxErrorCodes.INVALID_RESULT);
    expect(() => storeResult('x'.repeat(70_000))).toThrowError(expect.objectContaining({ code: InboxErrorCodes.INVALID_RESULT }));
  });

  it('refuses what leased mode cannot do: a batch processor, a leaseMs out of range', () => {
    expect(() => withInboxBatch(async () => {}, { ...leased() } as never)).toThrowError(expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS }));
    for (const leaseMs of [0, 99, 1.5, 86_400_001, Number.NaN]) {
      expect(() => withInbox(async () => {}, leased({ leaseMs }))).toThrowError(expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS }));
    }
    expect(() => withInbox(async () => {}, { ...database.options(), mode: 'optimistic' } as never)).toThrowError(
      expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS }),
    );
  });

  describe('with a consumer clock hours off', () => {
    beforeEach(() => {
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(Date.now() - 6 * 3_600_000);
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    it('lease expiry is the server time: the lease is leaseMs long, a copy is busy, and it expires on time', async () => {
      const entered = gate();
      const hold = gate();
      const process = withInbox(
        async () => {
          entered.open();
          await hold.opened;
        },
        leased({ leaseMs: 2_000 }),
      );
      const running = process({ id: 'skew', payload: {} });
      await entered.opened;
      const [lease] = await t.query<{ ms: number }>(
        `select extract(epoch from (lease_expires_at - now())) * 1000 as ms from "${t.schema}".inbox where message_id = 'skew'`,
      );
      expect(Number(lease!.ms)).toBeGreaterThan(1_000);
      expect(Number(lease!.ms)).toBeLessThanOrEqual(2_000);
      expect(await process({ id: 'skew', payload: {} })).toMatchObject({ status: 'busy' });
      hold.open();
      expect(await running).toMatchObject({ status: 'processed' });
    });
  });
});

/**
 * Cases that need two database sessions at once: two copies in flight, or a row lock held by one
 * session while another waits on it. PGlite is a single session (a second statement waits for the
 * first one's transaction, not for its lock), so these run on the drivers of a real server.
 */
const TWO_SESSION_DRIVERS = DRIVERS.filter((driver) => driver !== 'pglite');

describe.each(TWO_SESSION_DRIVERS)('leased mode with two sessions on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 6 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const leased = (extra: Record<string, unknown> = {}) => ({ ...database.options(extra), mode: 'leased' as const });
  const attempts = async (id: string) =>
    (await t.query<{ attempts: number }>(`select attempts from "${t.schema}".inbox_attempts where message_id = '${id}'`))[0];

  it('an always-failing handler that outruns its lease, with two copies taking it over from each other, still ends in dead-letter', async () => {
    let runs = 0;
    const process = withInbox(
      async () => {
        runs++;
        await sleep(500); // a provider call that cannot be cut short, longer than the lease
        throw new Error('the provider says no, always');
      },
      leased({ leaseMs: 200, maxAttempts: 2 }),
    );
    let ended: InboxOutcome | undefined;
    const copy = async (startAfter: number) => {
      await sleep(startAfter);
      while (ended === undefined) {
        const outcome = await process({ id: 'overtaken', payload: {} });
        if (outcome.status === 'dead-letter') ended ??= outcome;
        else await sleep(100); // the broker redelivers this copy
      }
    };
    await Promise.race([Promise.all([copy(0), copy(300)]), sleep(8_000)]);
    expect(ended).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
    expect(runs).toBeLessThanOrEqual(4);
  }, 20_000);

  it('the leased claim waits on a locked row at most lockTimeoutMs: then a retry (in-progress), not counted', async () => {
    const entered = gate();
    const hold = gate();
    // A transactional copy of the same consumer holds the row lock while its handler runs.
    const holder = withInbox(async () => {
      entered.open();
      await hold.opened;
    }, database.options());
    const holding = holder({ id: 'locked', payload: {} });
    await entered.opened;
    const started = performance.now();
    const waiting = await withInbox(async () => {}, leased({ lockTimeoutMs: 200 }))({ id: 'locked', payload: {} });
    expect(waiting).toMatchObject({ status: 'retry', reason: 'in-progress', error: { code: InboxErrorCodes.LOCK_TIMEOUT } });
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(await attempts('locked')).toBeUndefined();
    hold.open();
    expect(await holding).toMatchObject({ status: 'processed' });
  });
});
