import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import type { InboxMessage } from './types.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

/**
 * Savepoints of one transaction run side by side (`Promise.all` of `tx.transaction()` calls): one's
 * RELEASE or ROLLBACK TO ends or undoes the other's, so a savepoint that reported success could lose
 * its writes under a `processed` outcome. The second is refused and the attempt fails, counted.
 */
describe.each(DRIVERS)('tx.transaction() side by side on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 3 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const inboxIds = async () => (await t.query<{ message_id: string }>(`select message_id from "${t.schema}".inbox order by 1`)).map((r) => r.message_id);
  const attempts = async () =>
    (
      await t.query<{ message_id: string; attempts: number; last_error_code: string }>(
        `select message_id, attempts, last_error_code from "${t.schema}".inbox_attempts order by 1`,
      )
    ).map((r) => [r.message_id, r.attempts, r.last_error_code]);
  /** Two savepoints at once: one writes and succeeds, the other fails later and the handler catches it. */
  const sideBySide = async (tx: any, messageId: string) =>
    Promise.all([
      tx.transaction(async (nested: any) => {
        await nested.insert(t.effects).values({ messageId, value: 'kept?' });
        return 'written';
      }),
      tx
        .transaction(async (nested: any) => {
          await nested.execute(sql`select 1/0`);
        })
        .catch(() => 'caught'),
    ]);

  it('the second is refused and the attempt fails with OVERLAPPING_SAVEPOINTS, counted, nothing committed, even though the handler caught it', async () => {
    let saw: unknown;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      saw = await sideBySide(tx, message.id);
    }, database.options());
    const outcome = await process({ id: 's1', payload: {} });
    expect(saw).toEqual(['written', 'caught']);
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed', error: { code: InboxErrorCodes.OVERLAPPING_SAVEPOINTS } });
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
    expect(await attempts()).toEqual([['s1', 1, InboxErrorCodes.OVERLAPPING_SAVEPOINTS]]);
  });

  it('uncaught, the refusal ends the handler only once the open savepoint settled: its writes roll back with the transaction, none run after it', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await Promise.all([
        tx.transaction(async (nested: any) => {
          await nested.execute(sql`select pg_sleep(0.05)`);
          await nested.insert(t.effects).values({ messageId: message.id, value: 'first' });
          await nested.insert(t.effects).values({ messageId: message.id, value: 'second' });
        }),
        tx.transaction(async (nested: any) => {
          await nested.insert(t.effects).values({ messageId: message.id, value: 'never' });
        }),
      ]);
    }, database.options());
    const outcome = await process({ id: 'u1', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', error: { code: InboxErrorCodes.OVERLAPPING_SAVEPOINTS } });
    await new Promise((resolve) => setTimeout(resolve, 200)); // anything sent late would have landed by now
    expect(await t.countEffects()).toBe(0);
    expect(await inboxIds()).toEqual([]);
  });

  it("tx.transaction() called inside its own savepoint's callback is refused at once: a counted failure, nothing committed, no deadlock", async () => {
    // The call used to wait for the open savepoint to settle, which was waiting for the call.
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.transaction(async (nested: any) => {
        await nested.insert(t.effects).values({ messageId: message.id, value: 'outer' });
        await tx.transaction(async (inner: any) => {
          await inner.insert(t.effects).values({ messageId: message.id, value: 'inner' });
        });
      });
    }, database.options());
    const outcome = await process({ id: 'o1', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed', error: { code: InboxErrorCodes.OVERLAPPING_SAVEPOINTS } });
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
    expect(await attempts()).toEqual([['o1', 1, InboxErrorCodes.OVERLAPPING_SAVEPOINTS]]);
  });

  it('a savepoint the handler left running (not awaited) ends inside its transaction: processed with its writes, none after COMMIT', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      void tx.transaction(async (nested: any) => {
        await nested.execute(sql`select pg_sleep(0.05)`);
        await nested.insert(t.effects).values({ messageId: message.id, value: 'late' });
      });
    }, database.options());
    expect(await process({ id: 'f1', payload: {} })).toMatchObject({ status: 'processed' });
    await new Promise((resolve) => setTimeout(resolve, 200)); // anything sent late would have landed by now
    expect(await t.countEffects('f1')).toBe(1);
    expect(await inboxIds()).toEqual(['f1']);
  });

  it('in a batch too: every message of it retries, counted', async () => {
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      await sideBySide(tx, messages[0]!.id);
    }, database.options());
    const outcomes = await process(['b1', 'b2'].map((id) => ({ id, payload: {} })));
    expect(outcomes.map((o) => [o.status, o.error?.code])).toEqual([
      ['retry', InboxErrorCodes.OVERLAPPING_SAVEPOINTS],
      ['retry', InboxErrorCodes.OVERLAPPING_SAVEPOINTS],
    ]);
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
  });

  it('savepoints one after another, and nested in each other, are untouched: processed with every write', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.transaction(async (a: any) => {
        await a.insert(t.effects).values({ messageId: message.id, value: 'a' });
        await a.transaction(async (inner: any) => {
          await inner.insert(t.effects).values({ messageId: message.id, value: 'a.inner' });
        });
        await a.transaction(async (inner: any) => {
          await inner.insert(t.effects).values({ messageId: message.id, value: 'a.inner2' });
        });
      });
      // A savepoint allowed to fail, caught: the documented pattern keeps working.
      await tx.transaction(async (b: any) => b.execute(sql`select 1/0`)).catch(() => {});
      await tx.transaction(async (c: any) => {
        await c.insert(t.effects).values({ messageId: message.id, value: 'c' });
      });
    }, database.options());
    expect(await process({ id: 'n1', payload: {} })).toMatchObject({ status: 'processed' });
    expect(await t.countEffects('n1')).toBe(4);
    expect(await attempts()).toEqual([]);
  });

  it("the handler's tx is the driver's own Drizzle transaction object, not a wrapper made per message", async () => {
    // A wrapper made with Object.create(tx) turned every message's transaction into a prototype with
    // a map of its own, and Drizzle's property reads on it went megamorphic: about 40% more Node CPU
    // per message. The watch is an own property of the transaction instead.
    const prototypes = new Set<unknown>();
    const process = withInbox(async (_message: InboxMessage, tx: any) => {
      prototypes.add(Object.getPrototypeOf(tx));
      expect(Object.hasOwn(tx, 'transaction')).toBe(true);
    }, database.options());
    for (const id of ['p1', 'p2', 'p3']) expect(await process({ id, payload: {} })).toMatchObject({ status: 'processed' });
    expect(prototypes.size).toBe(1);
    expect((prototypes.values().next().value as { constructor: { name: string } }).constructor.name).toMatch(/Transaction$/);
  });
});
