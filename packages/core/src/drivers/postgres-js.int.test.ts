import { databaseUrl, POSTGRES_JS_MAJOR, postgres, type TestDatabase } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/postgres-js';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Options, PostgresType, Sql } from 'postgres';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from '../__tests__/migrated-database.js';
import { inboxStatus, inspectMessage, listDeadLetters, pendingMigrations, previewPurge, releaseMessage, requeueMessage } from '../admin/index.js';
import { InboxErrorCodes } from '../errors.js';
import { inspectLeases } from '../leased/lease-report.js';
import { purgeInbox } from '../retention.js';
import { startInboxRetention } from '../retention-scheduler.js';
import { migrate } from '../migrations/migrate.js';
import type { InboxMessage } from '../types.js';
import { withInbox } from '../with-inbox.js';
import { withInboxBatch } from '../with-inbox-batch.js';
import { unguardedPostgresJs } from './handler-transaction.js';

/**
 * postgres-js pipelines statements and resolves a transaction when COMMIT answers, whatever the
 * answer: what inboxed must not trust, and the client settings it cannot work under.
 */
describe('postgres-js: COMMIT answered with ROLLBACK, and client settings inboxed refuses', () => {
  const database = useMigratedDatabase('postgres-js', { poolSize: 4 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const inboxIds = async () => (await t.query<{ message_id: string }>(`select message_id from "${t.schema}".inbox order by 1`)).map((r) => r.message_id);
  const attempts = async () =>
    (await t.query<{ message_id: string; attempts: number }>(`select message_id, attempts from "${t.schema}".inbox_attempts order by 1`)).map((r) => [
      r.message_id,
      r.attempts,
    ]);
  /**
   * What such an attempt fails with. 3.x resolves a COMMIT the server answered with ROLLBACK, and
   * inboxed's look after COMMIT reports it (TRANSACTION_ABORTED). 4.x watches the transaction's
   * statements itself: it throws the failed statement's own error before COMMIT when that answer is
   * in by then (HANDLER_FAILED, the SQLSTATE kept), or its TRANSACTION_ROLLED_BACK after COMMIT
   * (TRANSACTION_ABORTED). Either way a counted failure with nothing committed, asserted below.
   */
  const rolledBackCodes: string[] =
    POSTGRES_JS_MAJOR === 3 ? [InboxErrorCodes.TRANSACTION_ABORTED] : [InboxErrorCodes.TRANSACTION_ABORTED, InboxErrorCodes.HANDLER_FAILED];
  /** A helper the handler forgets to await: a read, then a write that fails (id 1 is taken). */
  const forgottenAudit = async (tx: any, messageId: string) => {
    await tx.execute(sql`select 1`);
    await tx.insert(t.effects).values({ id: 1, messageId: `audit-${messageId}` });
  };
  /**
   * The same write sent past inboxed's guard, on the transaction's own postgres-js connection, behind
   * the completion check: through `tx` it would be refused once the handler returned (see the first
   * test), so this stands for any path the guard does not cover, to test the look after COMMIT.
   */
  const failingPastTheGuard = (tx: any, messageId: string) => {
    const scoped = unguardedPostgresJs(tx.session.client) as any;
    scoped
      .unsafe('select 1')
      .then(() => scoped.unsafe(`insert into "${t.schema}".effects (id, message_id) values (1, 'audit-${messageId}')`))
      .catch(() => {});
  };

  it('a statement the handler did not await, sent after it returned, is refused (TRANSACTION_ENDED): it never runs after COMMIT, on whatever the connection serves next', async () => {
    let audit: Promise<unknown> | undefined;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ id: 1, messageId: message.id });
      audit = forgottenAudit(tx, message.id);
      audit.catch(() => {}); // asserted below
    }, database.options());
    const outcome = await process({ id: 'd1', payload: {} });
    expect(outcome).toMatchObject({ status: 'processed' });
    await expect(audit).rejects.toMatchObject({ cause: { code: InboxErrorCodes.TRANSACTION_ENDED } }); // Drizzle wraps it
    expect(await inboxIds()).toEqual(['d1']);
    expect(await t.countEffects()).toBe(1);
    expect(await attempts()).toEqual([]);
  });

  it('a failing statement past the guard, behind the completion check: the transaction rolled back, so the outcome is a counted failure, never processed', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ id: 1, messageId: message.id });
      failingPastTheGuard(tx, message.id);
    }, database.options());
    const outcome = await process({ id: 'd1', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(rolledBackCodes).toContain(outcome.error?.code);
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
    expect(await attempts()).toEqual([['d1', 1]]);
  });

  it('a copy waiting on the claim commits the same id once our COMMIT rolled back: the outcome is still our counted failure, not processed', async () => {
    // The copy: another session's claim of the same id, queued on our uncommitted row. When our
    // transaction rolls back it goes through and commits, racing our look after COMMIT. Reading the
    // rows back would find its row and call our rolled-back attempt processed.
    let copy: Promise<unknown> | undefined;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ id: 1, messageId: message.id });
      copy = t.query(`insert into "${t.schema}".inbox (consumer, message_id, status) values ('c', 'd2', 'processed') on conflict do nothing`);
      const queued = `select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like 'insert into "${t.schema}".inbox%'`;
      await expect.poll(async () => (await t.query(queued)).length).toBe(1);
      failingPastTheGuard(tx, message.id);
    }, database.options());
    const outcome = await process({ id: 'd2', payload: {} });
    await copy;
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(rolledBackCodes).toContain(outcome.error?.code);
    expect(await inboxIds()).toEqual(['d2']); // the copy's row
    expect(await t.countEffects()).toBe(0); // our effect rolled back
    expect(await attempts()).toEqual([['d2', 1]]);
  });

  it('the same in a batch: no message of the rolled-back batch is reported processed', async () => {
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      await tx.insert(t.effects).values(messages.map((m, i) => ({ id: i + 1, messageId: m.id })));
      failingPastTheGuard(tx, 'batch');
    }, database.options());
    const outcomes = await process(['a', 'b'].map((id) => ({ id, payload: {} })));
    expect(outcomes.map((o) => o.status)).toEqual(['retry', 'retry']);
    expect(outcomes.every((o) => rolledBackCodes.includes(o.error?.code ?? ''))).toBe(true);
    expect(await inboxIds()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
  });

  describe('client settings that rewrite what inboxed reads are refused up front, with INVALID_OPTIONS', () => {
    const clients: Sql[] = [];
    afterEach(async () => {
      await Promise.all(clients.splice(0).map((client) => client.end()));
    });
    const settings: [string, Options<Record<string, PostgresType>>][] = [
      ['transform: postgres.camel', { transform: postgres.camel }],
      ['a column transform', { transform: { column: { from: postgres.toCamel } } }],
      ['a value transform', { transform: { value: { from: (value: unknown) => value } } }],
      ['a row transform', { transform: { row: { from: (row: unknown) => row } } }],
      ['fetch_types: false', { fetch_types: false }],
    ];
    it.each(settings)('%s', async (_name, setting) => {
      const client = postgres(databaseUrl(), { max: 1, onnotice: () => {}, ...setting });
      clients.push(client);
      const db = drizzle(client);
      const options = { db, consumer: 'c', tables: { schema: t.schema } };
      const refused = { code: InboxErrorCodes.INVALID_OPTIONS };
      expect(() => withInbox(async () => {}, options)).toThrow(expect.objectContaining(refused));
      expect(() => withInboxBatch(async () => {}, options)).toThrow(expect.objectContaining(refused));
      expect(() => withInbox(async () => {}, { ...options, mode: 'leased' })).toThrow(expect.objectContaining(refused));
      await expect(migrate(db, { schema: t.schema })).rejects.toMatchObject(refused);
      // The operations' functions read the inbox's rows by name too: a status, a purge count or a
      // repair's decision read through this client would rest on fields that look missing.
      const names = { schema: t.schema };
      const repair = { reason: 'test', actor: 'test' };
      await expect(inboxStatus(db, names)).rejects.toMatchObject(refused);
      await expect(listDeadLetters(db, names)).rejects.toMatchObject(refused);
      await expect(inspectMessage(db, names, 'c', 'm')).rejects.toMatchObject(refused);
      await expect(pendingMigrations(db, names)).rejects.toMatchObject(refused);
      await expect(releaseMessage(db, names, 'c', 'm', repair)).rejects.toMatchObject(refused);
      await expect(requeueMessage(db, names, 'c', 'm', repair)).rejects.toMatchObject(refused);
      await expect(previewPurge(db, names, { olderThanMs: 60_000 })).rejects.toMatchObject(refused);
      await expect(purgeInbox(db, { olderThanMs: 60_000, tables: names })).rejects.toMatchObject(refused);
      await expect(inspectLeases(db, { tables: names })).rejects.toMatchObject(refused);
      expect(() => startInboxRetention(db, { olderThanMs: 60_000, everyMs: 60_000, tables: names })).toThrow(expect.objectContaining(refused));
      // A transaction of that client hides its settings: the operations functions refuse any postgres-js transaction.
      await db.transaction(async (tx) => {
        await expect(inboxStatus(tx, names)).rejects.toMatchObject(refused);
        await expect(inspectMessage(tx, names, 'c', 'm')).rejects.toMatchObject(refused);
        await expect(inspectLeases(tx, { tables: names })).rejects.toMatchObject(refused);
      });
    });
  });
});

/**
 * The handler's `tx` wraps postgres-js's transaction-scoped `sql` (`tx.session.client`): what a
 * handler reaching for it gets is refused or waited for the same way, also on the one connection the
 * next delivery then runs on.
 */
describe("postgres-js: the handler transaction's own client", () => {
  const database = useMigratedDatabase('postgres-js', { poolSize: 1 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const effects = async () => (await t.query<{ message_id: string }>(`select message_id from "${t.schema}".effects order by id`)).map((r) => r.message_id);
  const insertEffect = (messageId: string) => `insert into "${t.schema}".effects (message_id) values ('${messageId}')`;

  it('a query is checked when it is sent: made before the handler returned but awaited after, it is refused; never awaited, it is never sent', async () => {
    let awaitedLate: unknown;
    let made: PromiseLike<unknown> | undefined;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      const client = tx.session.client;
      made = client.unsafe(insertEffect(`${message.id}-made`));
      client.unsafe(insertEffect(`${message.id}-never-awaited`));
      await tx.insert(t.effects).values({ messageId: message.id });
    }, database.options());
    expect(await process({ id: 'q', payload: {} })).toMatchObject({ status: 'processed' });
    // Awaited only once the transaction is over (a timer here raced a slow commit on a loaded machine).
    made!.then(undefined, (error: unknown) => (awaitedLate = error));
    await expect.poll(() => awaitedLate).toMatchObject({ code: InboxErrorCodes.TRANSACTION_ENDED });
    expect(await effects()).toEqual(['q']);
  });

  it('a refused query the handler never awaits is not an unhandled rejection (postgres-js queries are lazy, and so is the refusal)', async () => {
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    try {
      const withLateQuery = withInbox(async (message: InboxMessage, tx: any) => {
        const client = tx.session.client;
        setTimeout(() => client.unsafe(insertEffect(`${message.id}-late`)), 0);
        client.unsafe('rollback'); // refused at once, never awaited
        await tx.insert(t.effects).values({ messageId: message.id });
      }, database.options());
      expect(await withLateQuery({ id: 'lazy', payload: {} })).toMatchObject({ status: 'retry', error: { code: InboxErrorCodes.TRANSACTION_ENDED } });
      await sleep(50);
      expect(unhandled).toEqual([]);
      expect(await effects()).toEqual([]);
    } finally {
      process.off('unhandledRejection', record);
    }
  });

  it('a savepoint it left running is settled before the transaction ends: its ROLLBACK TO never reaches the next delivery', async () => {
    let leftRunning: Promise<unknown> | undefined;
    const leaky = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        const savepoint: Promise<unknown> = tx.session.client.savepoint(async () => {
          await sleep(300);
          throw new Error('fails after the handler returned'); // postgres-js sends ROLLBACK TO itself
        });
        savepoint.catch(() => {}); // asserted below
        leftRunning = savepoint;
      },
      database.options({ consumer: 'leaky' }),
    );
    const next = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.transaction((savepoint: any) => savepoint.insert(t.effects).values({ messageId: `${message.id}-in-savepoint` }));
        await sleep(500);
        await tx.insert(t.effects).values({ messageId: message.id });
      },
      database.options({ consumer: 'next' }),
    );
    expect(await leaky({ id: 'leaky', payload: {} })).toMatchObject({ status: 'processed' });
    await expect(leftRunning).rejects.toThrow('fails after the handler returned');
    expect(await next({ id: 'next', payload: {} })).toMatchObject({ status: 'processed' });
    expect(await effects()).toEqual(['leaky', 'next-in-savepoint', 'next']);
  });
});
