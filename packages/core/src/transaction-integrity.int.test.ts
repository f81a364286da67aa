import { DRIVERS, createTestDatabase, databaseUrl, type TestDatabase } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import { migrate } from './migrations/migrate.js';
import { storeResult } from './stored-result.js';
import { reject, type InboxMessage } from './types.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

// `processed` and `rejected` must mean "the claim row and the handler's writes committed". These
// handlers break the transaction in the ways real code does (a caught failing statement) and
// hostile code does (raw ROLLBACK/COMMIT); the outcome is checked against the database's real state.
describe.each(DRIVERS)('transaction integrity on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 4 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  const inboxIds = async () => (await t.query<{ message_id: string }>(`select message_id from "${t.schema}".inbox order by 1`)).map((r) => r.message_id);
  const attempts = () =>
    t.query<{ message_id: string; attempts: number; last_error_code: string }>(
      `select message_id, attempts, last_error_code from "${t.schema}".inbox_attempts order by 1`,
    );
  const options = database.options;

  /** The everyday "insert, ignore the unique violation" pattern: PostgreSQL aborts the whole transaction anyway. */
  async function insertIgnoringDuplicate(tx: any, messageId: string) {
    await tx.insert(t.effects).values({ id: 1, messageId });
    try {
      await tx.insert(t.effects).values({ id: 1, messageId });
    } catch {
      // "already there, fine"
    }
  }

  it('a handler that swallows a failed statement is a counted failure (TRANSACTION_ABORTED), then dead-lettered; nothing commits', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => insertIgnoringDuplicate(tx, message.id), options({ maxAttempts: 2 }));
    const first = await process({ id: 'swallow', payload: {} });
    expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(first.error?.code).toBe(InboxErrorCodes.TRANSACTION_ABORTED);
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
    const second = await process({ id: 'swallow', payload: {} });
    expect(second).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded', attempt: 2 });
    expect(await attempts()).toEqual([{ message_id: 'swallow', attempts: 2, last_error_code: InboxErrorCodes.TRANSACTION_ABORTED }]);
    expect(await inboxIds()).toEqual([]);
  });

  it('a handler that swallows a failure and then rejects is not recorded as rejected', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await insertIgnoringDuplicate(tx, message.id);
      return reject('declined');
    }, options());
    const outcome = await process({ id: 'swallow-reject', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.TRANSACTION_ABORTED);
    expect(await inboxIds()).toEqual([]);
  });

  it('a ROLLBACK the handler sends itself is refused: a counted failure (TRANSACTION_ENDED) even when it catches the refusal; nothing it wrote commits', async () => {
    let refusal: unknown;
    const process = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id, value: 'before' });
        await tx.execute(sql`rollback`).catch((error: unknown) => (refusal = error));
        await tx.insert(t.effects).values({ messageId: message.id, value: 'after' });
      },
      options({ maxAttempts: 2 }),
    );
    const first = await process({ id: 'rollback', payload: {} });
    expect(refusal).toMatchObject({ cause: { code: InboxErrorCodes.TRANSACTION_ENDED } }); // Drizzle wraps it
    expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(first.error?.code).toBe(InboxErrorCodes.TRANSACTION_ENDED);
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
    expect(await process({ id: 'rollback', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
  });

  it('a COMMIT the handler sends itself, in whatever form, is refused before it commits anything: counted (TRANSACTION_ENDED), and the redelivery runs the handler again', async () => {
    const forms = [
      'commit',
      'COMMIT; BEGIN',
      '/* done */ end',
      'select 1; commit and chain',
      "prepare transaction 'inbox'",
      '-- a comment ends at a carriage return too\rcommit',
      "select '\\''; commit; --'", // a COMMIT whichever way standard_conforming_strings reads the backslash
    ];
    const process = withInbox(async (message: InboxMessage, tx: any, { attempt }) => {
      await tx.insert(t.effects).values({ messageId: message.id, value: `attempt ${attempt}` });
      if (attempt === 1) await tx.execute(sql.raw(forms[Number(message.id)]!));
    }, options());
    for (const [index] of forms.entries()) {
      const first = await process({ id: String(index), payload: {} });
      expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
      expect(first.error?.code).toBe(InboxErrorCodes.TRANSACTION_ENDED);
    }
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
    expect((await attempts()).map((row) => row.last_error_code)).toEqual(forms.map(() => InboxErrorCodes.TRANSACTION_ENDED));
    for (const [index] of forms.entries()) expect(await process({ id: String(index), payload: {}, attempt: 2 })).toMatchObject({ status: 'processed' });
    expect(await t.query(`select distinct value from "${t.schema}".effects`)).toEqual([{ value: 'attempt 2' }]);
    // Nothing reached the server outside a transaction: no WARNING (postgres-js logs every notice by default).
    expect(t.notices.filter((notice) => notice.startsWith('WARNING'))).toEqual([]);
  });

  it('a ROLLBACK the handler did not await, sent once it returned (between the completion check and COMMIT), is refused: processed means committed', async () => {
    let late: Promise<unknown> | undefined;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      late = (async () => {
        await tx.execute(sql`select 1`);
        await sleep(20); // sent in a later turn than the handler's return: the ROLLBACK comes late
        await tx.execute(sql`rollback`);
      })();
      late.catch(() => {}); // asserted below
    }, options());
    const outcome = await process({ id: 'late-rollback', payload: {} });
    await expect(late).rejects.toMatchObject({ cause: { code: InboxErrorCodes.TRANSACTION_ENDED } }); // Drizzle wraps it
    expect(outcome).toMatchObject({ status: 'processed' });
    expect(await inboxIds()).toEqual(['late-rollback']);
    expect(await t.countEffects()).toBe(1);
  });

  /**
   * A statement the handler schedules to run after it returned: the timer fires while inboxed records
   * the outcome (`markRejected`, `markResult`), which it must not reach. `sleep(1)` first puts the
   * handler's return in the event loop's timers phase, so the timer below fires in the next turn.
   */
  function lateRollback(tx: any): Promise<unknown> {
    return new Promise((settle) => setTimeout(() => tx.execute(sql`rollback`).then(settle, settle), 0));
  }

  for (const ending of ['reject', 'storeResult'] as const) {
    it(`a ROLLBACK scheduled by a handler that returns ${ending}() is refused while inboxed records the outcome, which commits`, async () => {
      let late: Promise<unknown> | undefined;
      const process = withInbox(async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        await sleep(1);
        late = lateRollback(tx);
        return ending === 'reject' ? reject('not for us') : storeResult({ charged: true });
      }, options());
      const outcome = await process({ id: `late-${ending}`, payload: {} });
      expect(await late).toMatchObject({ cause: { code: InboxErrorCodes.TRANSACTION_ENDED } });
      expect(outcome).toMatchObject(ending === 'reject' ? { status: 'rejected', reason: 'not for us' } : { status: 'processed', result: { charged: true } });
      const rows = await t.query<{ status: string; result: unknown }>(`select status, result from "${t.schema}".inbox`);
      expect(rows).toEqual([ending === 'reject' ? { status: 'rejected', result: null } : { status: 'processed', result: '{"charged":true}' }]);
      expect(await t.countEffects()).toBe(1);
    });
  }

  it('withInboxBatch: a ROLLBACK scheduled by a handler that returns rejections is refused; the batch commits as reported', async () => {
    let late: Promise<unknown> | undefined;
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      await sleep(1);
      late = lateRollback(tx);
      return new Map([['b1', reject('not for us')]]);
    }, options());
    const outcomes = await process(['b1', 'b2'].map((id) => ({ id, payload: {} })));
    expect(await late).toMatchObject({ cause: { code: InboxErrorCodes.TRANSACTION_ENDED } });
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'processed']);
    expect(await t.query(`select message_id, status from "${t.schema}".inbox order by 1`)).toEqual([
      { message_id: 'b1', status: 'rejected' },
      { message_id: 'b2', status: 'processed' },
    ]);
    expect(await t.countEffects()).toBe(2);
  });

  it('a handler that deletes its own inbox row cannot make the effect commit without it', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      await tx.execute(sql.raw(`delete from "${t.schema}".inbox`));
    }, options());
    const outcome = await process({ id: 'delete', payload: {} });
    expect(outcome.error?.code).toBe(InboxErrorCodes.TRANSACTION_ENDED);
    expect(await t.countEffects()).toBe(0);
  });

  it('the client behind tx hands out no raw connection and no switch of its guard, so nothing gets past it', async () => {
    // A raw handle would let a statement deleting the inbox row run behind the completion check
    // (processed, the effect committed, the row gone: the redelivery ran again), or reopen the gate.
    let reachable: Record<string, unknown> | undefined;
    let statics: string[] | undefined;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      const client = tx.session.client;
      reachable = Object.fromEntries(
        [...Object.getOwnPropertyNames(client), ...Object.keys(client)].map((name) => [name, typeof client[name]]).filter(([, type]) => type !== 'function'),
      );
      // Nor through its class: a static accessor would be one call away (tx.session.client.constructor).
      statics = Object.getOwnPropertyNames(client.constructor).filter((name) => !['length', 'name', 'prototype'].includes(name));
    }, options());
    expect(await process({ id: 'reach', payload: {} })).toMatchObject({ status: 'processed' });
    expect(reachable).toEqual({});
    expect(statics).toEqual([]);
  });

  it('a failure caught inside a nested transaction (savepoint) is fine: processed', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ id: 1, messageId: message.id });
      await tx.transaction(async (nested: any) => nested.insert(t.effects).values({ id: 1, messageId: message.id })).catch(() => {});
    }, options());
    expect(await process({ id: 'savepoint', payload: {} })).toMatchObject({ status: 'processed' });
    expect(await inboxIds()).toEqual(['savepoint']);
    expect(await t.countEffects()).toBe(1);
  });

  it('withInboxBatch: a swallowed failure for one message isolates it; its neighbours commit', async () => {
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      if (messages.some((m) => m.id === 'b')) await tx.execute(sql`select 1/0`).catch(() => {});
    }, options());
    const outcomes = await process(['a', 'b', 'c'].map((id) => ({ id, payload: {} })));
    expect(outcomes.map((o) => [o.messageId, o.status, o.error?.code])).toEqual([
      ['a', 'processed', undefined],
      ['b', 'retry', InboxErrorCodes.TRANSACTION_ABORTED],
      ['c', 'processed', undefined],
    ]);
    expect(await inboxIds()).toEqual(['a', 'c']);
    expect(await t.countEffects()).toBe(2);
  });

  it('withInboxBatch: a handler that sends ROLLBACK is a counted failure for every message, none recorded as processed', async () => {
    const process = withInboxBatch(async (_messages: InboxMessage[], tx: any) => {
      await tx.execute(sql`rollback`);
    }, options());
    const outcomes = await process(['a', 'b'].map((id) => ({ id, payload: {} })));
    expect(outcomes.map((o) => [o.status, o.error?.code])).toEqual([
      ['retry', InboxErrorCodes.TRANSACTION_ENDED],
      ['retry', InboxErrorCodes.TRANSACTION_ENDED],
    ]);
    expect(await inboxIds()).toEqual([]);
  });

  it('one connection, many deliveries: one delivery rolling back never discards another one reported processed', async () => {
    // A pool of one (or PGlite, one session by nature) shared by 20 concurrent deliveries.
    const single = await createTestDatabase(driver, { poolSize: 1 });
    try {
      await migrate(single.db, { schema: single.schema });
      const process = withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(single.effects).values({ messageId: message.id });
          await new Promise((r) => setTimeout(r, 2));
          if (Number(message.id.slice(2)) % 2 === 1) throw new Error('odd ones fail');
        },
        { db: single.db, consumer: 'c', tables: { schema: single.schema }, backoff: { baseDelayMs: 1 } },
      );
      const ids = Array.from({ length: 20 }, (_, i) => `m-${i}`);
      const outcomes = await Promise.all(ids.map((id) => process({ id, payload: {} })));
      // On a loaded machine an even delivery may also come back `retry` for a reason that is not its
      // own (an infrastructure retry, never counted); redelivered, it is processed. What must never
      // happen: an odd one processed, or an even one processed without its effect.
      const odd = (id: string) => Number(id.slice(2)) % 2 === 1;
      expect(outcomes.filter((o) => o.status !== 'processed' && o.status !== 'retry')).toEqual([]);
      expect(outcomes.filter((o) => o.status === 'processed' && odd(o.messageId))).toEqual([]);
      let pending = outcomes.filter((o) => o.status === 'retry' && !odd(o.messageId)).map((o) => o.messageId);
      const redelivered: string[] = [];
      for (let round = 0; round < 5 && pending.length > 0; round++) {
        const again = await Promise.all(pending.map((id) => process({ id, payload: {} })));
        redelivered.push(...again.filter((o) => o.status === 'processed').map((o) => o.messageId));
        pending = again.filter((o) => o.status !== 'processed').map((o) => o.messageId);
      }
      expect(pending).toEqual([]);
      const processed = [...outcomes.filter((o) => o.status === 'processed').map((o) => o.messageId), ...redelivered].sort();
      expect(processed).toEqual(ids.filter((_, i) => i % 2 === 0).sort());
      expect(outcomes.filter((o) => o.status === 'retry' && odd(o.messageId))).toHaveLength(10);
      for (const id of processed) expect(await single.countEffects(id)).toBe(1);
      expect(await single.countEffects()).toBe(10);
      const counted = await single.query<{ n: number }>(`select count(*)::int as n from "${single.schema}".inbox_attempts where attempts = 1`);
      expect(counted).toEqual([{ n: 10 }]);
    } finally {
      await single.close();
    }
  });
});

describe('a single node-postgres Client', () => {
  it('is refused at withInbox time with INVALID_OPTIONS naming the fix (concurrent deliveries would share one transaction)', async () => {
    const client = new pg.Client({ connectionString: databaseUrl() });
    const db = drizzleNodePg(client);
    for (const wrap of [withInbox, withInboxBatch] as const) {
      expect(() => wrap(async () => {}, { db, consumer: 'c' })).toThrowError(
        expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS, message: expect.stringMatching(/Pool/) }),
      );
    }
  });
});

describe.each(DRIVERS)('a Drizzle transaction passed as options.db on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  it('is refused with INVALID_OPTIONS: inboxed would only release a savepoint, and report processed while the caller could still roll back', async () => {
    const { t } = database;
    const refused = { code: InboxErrorCodes.INVALID_OPTIONS, message: expect.stringMatching(/Drizzle transaction/) };
    await t.db.transaction(async (tx: any) => {
      const options = { db: tx, consumer: 'c', tables: { schema: t.schema } };
      expect(() => withInbox(async () => {}, options)).toThrowError(expect.objectContaining(refused));
      expect(() => withInboxBatch(async () => {}, options)).toThrowError(expect.objectContaining(refused));
      expect(() => withInbox(async () => {}, { ...options, mode: 'leased' })).toThrowError(expect.objectContaining(refused));
    });
  });
});

/**
 * One connection for two deliveries. On postgres-js a ROLLBACK or COMMIT that reached the server
 * would make postgres-js hand the connection to the waiting delivery while the first one's check
 * and COMMIT were still to come on it: they ran inside the other's transaction (committing it mid-
 * handler, or rolling it back), or waited for ever behind its BEGIN.
 */
describe.each(DRIVERS)('a handler ending its own transaction, with another delivery waiting for the connection, on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 1 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  for (const ending of ['rollback', 'commit'] as const) {
    it(`${ending}: the waiting delivery commits exactly what it reports`, async () => {
      const ender = withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(t.effects).values({ messageId: message.id, value: 'ender' });
          await tx.execute(sql.raw(ending)).catch(() => {});
          await sleep(80); // the waiting delivery would have the connection by now
        },
        database.options({ consumer: 'ender' }),
      );
      const waiting = withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(t.effects).values({ messageId: message.id, value: 'waiting, 1' });
          await sleep(300);
          await tx.insert(t.effects).values({ messageId: message.id, value: 'waiting, 2' });
          throw new Error('the waiting delivery fails: nothing of it may commit');
        },
        database.options({ consumer: 'waiting' }),
      );
      const ended = ender({ id: 'a', payload: {} });
      await sleep(5);
      const [first, second] = await Promise.all([ended, waiting({ id: 'b', payload: {} })]);
      expect(first).toMatchObject({ status: 'retry', error: { code: InboxErrorCodes.TRANSACTION_ENDED } });
      expect(second).toMatchObject({ status: 'retry', reason: 'handler-failed' });
      expect(await t.query(`select message_id from "${t.schema}".inbox`)).toEqual([]);
      expect(await t.countEffects()).toBe(0);
    });
  }
});

describe('a session a handler poisoned, on node-postgres', () => {
  const database = useMigratedDatabase('node-postgres', { poolSize: 1 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  it('a claim refused on it (SET ROLE to a role that can only read) discards the connection: the next attempt gets a fresh one and processes', async () => {
    const role = `inboxed_reader_${t.schema}`;
    await t.query(`create role "${role}"`);
    // Enough for the poisoning delivery's own completion check, so its COMMIT keeps the SET ROLE.
    await t.query(`grant usage on schema "${t.schema}" to "${role}"; grant select on all tables in schema "${t.schema}" to "${role}"`);
    try {
      const poisoning = withInbox(
        async (_message: InboxMessage, tx: any) => {
          await tx.execute(sql.raw(`set session role "${role}"`)); // session-level: outlives the transaction
        },
        database.options({ consumer: 'poisoning' }),
      );
      const innocent = withInbox(
        async (message: InboxMessage, tx: any) => void (await tx.insert(t.effects).values({ messageId: message.id })),
        database.options(),
      );
      expect(await poisoning({ id: 'p', payload: {} })).toMatchObject({ status: 'processed' });
      const first = await innocent({ id: 'i', payload: {} });
      expect(first).toMatchObject({ status: 'retry', error: { code: InboxErrorCodes.INBOX_QUERY_FAILED } });
      expect(await innocent({ id: 'i', payload: {} })).toMatchObject({ status: 'processed' });
      expect(await t.countEffects('i')).toBe(1);
    } finally {
      await t.query(`drop owned by "${role}"; drop role "${role}"`);
    }
  });
});

// PGlite has no cursors or streams to send.
describe.each(DRIVERS.filter((driver) => driver !== 'pglite'))('a cursor or stream on the handler tx, on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 1 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  it('is refused (UNSUPPORTED_QUERY) before it is sent: one left open would hold the connection under the check and COMMIT', async () => {
    let refusal: unknown;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      const client = tx.session.client;
      if (driver === 'postgres-js') {
        try {
          client.unsafe('select generate_series(1, 10)').cursor(1);
        } catch (error) {
          refusal = error;
        }
      } else {
        // A Submittable, as pg-cursor and pg-query-stream are: it would be handed the connection.
        const cursor = { submit: () => {}, handleError: (error: unknown) => (refusal = error) };
        client.query(cursor);
        await sleep(10);
      }
      await tx.insert(t.effects).values({ messageId: message.id });
    }, database.options());
    expect(await process({ id: 'cursor', payload: {} })).toMatchObject({ status: 'processed' });
    expect(refusal).toMatchObject({ code: InboxErrorCodes.UNSUPPORTED_QUERY });
    expect(await t.countEffects('cursor')).toBe(1);
  });
});
