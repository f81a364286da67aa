import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { PermanentError } from './errors.js';
import { reject, type InboxMessage } from './types.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

const rowsOf = (result: unknown) => (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as Record<string, unknown>[];

describe.each(DRIVERS)('copies of one id inside a batch, on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  const options = database.options;
  const insertAll = async (messages: InboxMessage[], tx: any) => {
    await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
  };

  it('a copy of a message that was retried is retried too, never acked as a duplicate of an effect that did not commit', async () => {
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      await insertAll(messages, tx);
      if (messages.some((m) => m.id === 'x')) throw new Error('flaky');
    }, options());
    const outcomes = await process([
      { id: 'x', payload: 1 },
      { id: 'y', payload: 1 },
      { id: 'x', payload: 1 },
    ]);
    expect(outcomes.map((o) => [o.messageId, o.status, o.reason])).toEqual([
      ['x', 'retry', 'handler-failed'],
      ['y', 'processed', undefined],
      ['x', 'retry', 'handler-failed'],
    ]);
    expect(await t.countEffects('x')).toBe(0);
  });

  it('a copy of a message that was dead-lettered is dead-lettered too', async () => {
    const process = withInboxBatch(async (messages: InboxMessage[]) => {
      if (messages.some((m) => m.id === 'x')) throw new PermanentError('poison');
    }, options());
    const outcomes = await process([
      { id: 'x', payload: 1 },
      { id: 'x', payload: 1 },
    ]);
    expect(outcomes.map((o) => [o.status, o.reason])).toEqual([
      ['dead-letter', 'permanent-failure'],
      ['dead-letter', 'permanent-failure'],
    ]);
  });

  it('a genuine redelivery matching the stored fingerprint is a duplicate even when another copy in the batch conflicts', async () => {
    const process = withInboxBatch(insertAll, options());
    await process([{ id: 'x', payload: { amount: 1 } }]);
    const outcomes = await process([
      { id: 'x', payload: { amount: 2 } },
      { id: 'x', payload: { amount: 1 } },
    ]);
    expect(outcomes.map((o) => [o.status, o.reason])).toEqual([
      ['conflict', 'payload-mismatch'],
      ['duplicate', undefined],
    ]);
    const reversed = await process([
      { id: 'x', payload: { amount: 1 } },
      { id: 'x', payload: { amount: 2 } },
    ]);
    expect(reversed.map((o) => [o.status, o.reason])).toEqual([
      ['duplicate', undefined],
      ['conflict', 'payload-mismatch'],
    ]);
    expect(await t.countEffects('x')).toBe(1);
  });

  it('reasons are kept: a copy of a rejected message carries the rejection; an accepted mismatch keeps payload-mismatch', async () => {
    const rejecting = withInboxBatch(async (messages: InboxMessage[]) => new Map(messages.map((m) => [m.id, reject('out-of-stock')])), options());
    const outcomes = await rejecting([
      { id: 'r', payload: 1 },
      { id: 'r', payload: 1 },
    ]);
    expect(outcomes.map((o) => [o.status, o.reason])).toEqual([
      ['rejected', 'out-of-stock'],
      ['duplicate', 'out-of-stock'],
    ]);

    const lenient = withInboxBatch(insertAll, options({ consumer: 'lenient', onPayloadMismatch: 'duplicate' }));
    const mixed = await lenient([
      { id: 'm', payload: 1 },
      { id: 'm', payload: 2 },
      { id: 'm', payload: 1 },
    ]);
    expect(mixed.map((o) => [o.status, o.reason])).toEqual([
      ['processed', undefined],
      ['duplicate', 'payload-mismatch'],
      ['duplicate', 'duplicate-in-batch'],
    ]);
  });

  it("lockTimeoutMs bounds only the claim: the handler runs under the session's own lock_timeout", async () => {
    const seen: unknown[] = [];
    const single = withInbox(
      async (_m: InboxMessage, tx: any) => {
        seen.push(rowsOf(await tx.execute(sql`select current_setting('lock_timeout') as v`))[0]!.v);
      },
      options({ lockTimeoutMs: 1234 }),
    );
    const batch = withInboxBatch(
      async (_m: InboxMessage[], tx: any) => {
        seen.push(rowsOf(await tx.execute(sql`select current_setting('lock_timeout') as v`))[0]!.v);
      },
      options({ lockTimeoutMs: 1234 }),
    );
    expect((await single({ id: 'a', payload: 1 })).status).toBe('processed');
    expect(
      (
        await batch([
          { id: 'b', payload: 1 },
          { id: 'c', payload: 1 },
        ])
      ).map((o) => o.status),
    ).toEqual(['processed', 'processed']);
    expect(seen).toEqual(['0', '0']);
  });
});

// Two transactions at once need a real server: PGlite runs one transaction at a time.
describe.each(DRIVERS.filter((d) => d !== 'pglite'))('lock waits on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 6 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  const options = database.options;

  /** Starts a per-message delivery of `id` that holds its inbox row until `release()`. */
  async function holdRow(id: string) {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inHandler = new Promise<void>((resolve) => (entered = resolve));
    const holder = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      entered();
      await held;
    }, options());
    const done = holder({ id, payload: 1 });
    await inHandler;
    return { release, done };
  }

  it('one busy id in a batch leaves only itself retry (in-progress); its neighbours commit', async () => {
    const { release, done } = await holdRow('busy');
    const process = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      },
      // The split that isolates the busy id has one more lockTimeoutMs to do it in; past that, the
      // halves still holding it are retried whole (not lost, not counted). 1.5 s is ample for the
      // three levels of split even on a loaded CI machine; 300 ms was not.
      options({ lockTimeoutMs: 1_500 }),
    );
    const ids = ['a', 'b', 'busy', 'c', 'd', 'e', 'f', 'g'];
    const outcomes = await process(ids.map((id) => ({ id, payload: 1 })));
    release();
    expect((await done).status).toBe('processed');
    expect(outcomes.map((o) => [o.messageId, o.status, o.reason])).toEqual(
      ids.map((id) => (id === 'busy' ? [id, 'retry', 'in-progress'] : [id, 'processed', undefined])),
    );
    expect(await t.countEffects()).toBe(8);
    expect(await t.query(`select * from "${t.schema}".inbox_attempts`)).toEqual([]); // waiting is nobody's failure
    expect((await process([{ id: 'busy', payload: 1 }]))[0]).toMatchObject({ status: 'duplicate' });
  });

  it("a handler waiting on a hot row longer than lockTimeoutMs is not cut off by it (its wait is the session's)", async () => {
    await t.query(`insert into "${t.schema}".effects (id, message_id) values (1, 'hot')`);
    let release!: () => void;
    const locked = new Promise<void>((resolve) => (release = resolve));
    const locker = t.db.transaction(async (tx: any) => {
      await tx.execute(sql.raw(`select * from "${t.schema}".effects where id = 1 for update`));
      await locked;
    });
    await new Promise((r) => setTimeout(r, 50));
    const process = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.execute(sql.raw(`update "${t.schema}".effects set value = '"${message.id}"' where id = 1`));
      },
      options({ lockTimeoutMs: 100 }),
    );
    const pending = process({ id: 'contender', payload: 1 });
    await new Promise((r) => setTimeout(r, 400));
    release();
    await locker;
    expect(await pending).toMatchObject({ status: 'processed' });
  });
});
