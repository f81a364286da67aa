// Redelivered messages have their attempt counted before the handler runs, so a message that
// kills the process is still counted (the kill itself is tested in test/fault/core-crash.test.ts).
// Here: the count an attempt ends with is the same as without the flag, on every driver.
import { DRIVERS } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import type { InboxMessage } from './types.js';
import { withInboxBatch } from './with-inbox-batch.js';
import { withInbox } from './with-inbox.js';

describe.each(DRIVERS)('redelivered messages on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  const attempts = () =>
    database.t.query<{ message_id: string; attempts: number }>(`select message_id, attempts from "${database.t.schema}".inbox_attempts order by 1`);
  const write = async (message: InboxMessage, tx: any) => {
    await tx.insert(database.t.effects).values({ messageId: message.id });
  };

  it('a failing redelivery is counted once per attempt, and dead-lettered at maxAttempts as without the flag', async () => {
    const process = withInbox(
      async () => {
        throw new Error('still broken');
      },
      database.options({ maxAttempts: 3 }),
    );
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await process({ id: 'm', payload: 1, redelivered: i > 0 })).status);
    expect(statuses).toEqual(['retry', 'retry', 'dead-letter']);
    expect(await attempts()).toEqual([{ message_id: 'm', attempts: 3 }]);
  });

  it('a redelivery that succeeds, or is a duplicate, leaves no count behind', async () => {
    const process = withInbox(write, database.options());
    expect((await process({ id: 'm', payload: 1, redelivered: true })).status).toBe('processed');
    expect((await process({ id: 'm', payload: 1, redelivered: true })).status).toBe('duplicate');
    expect(await attempts()).toEqual([]);
    expect(await database.t.countEffects('m')).toBe(1);
  });

  it('a redelivery that was rejected, or retried for a reason that is not its own, leaves its earlier count as it was', async () => {
    const failOnce = withInbox(async () => {
      throw new Error('first attempt fails');
    }, database.options());
    await failOnce({ id: 'r', payload: 1 });
    const broken = withInbox(write, database.options({ tables: { schema: `${database.t.schema}_missing` } }));
    const missing = await broken({ id: 'r', payload: 1, redelivered: true });
    expect(missing).toMatchObject({ status: 'retry', error: { code: InboxErrorCodes.INBOX_TABLE_MISSING } });
    const { reject } = await import('./types.js');
    const rejecting = withInbox(async () => reject('not for us'), database.options());
    expect((await rejecting({ id: 'r', payload: 1, redelivered: true })).status).toBe('rejected');
    expect(await attempts()).toEqual([{ message_id: 'r', attempts: 1 }]);
  });

  it('redeliveries that failed or died before run one at a time, so a death is charged to the one running; others do not wait', async () => {
    // r1-r3 died before (their attempts records say so); n1 and n2 are redelivered for the first time.
    await database.t.query(
      `insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('c', 'r1', 1, 'ATTEMPT_UNFINISHED'), ('c', 'r2', 1, 'ATTEMPT_UNFINISHED'), ('c', 'r3', 1, 'ATTEMPT_UNFINISHED')`,
    );
    const running = new Set<string>();
    let suspectsOverlapped = false;
    let othersOverlapped = false;
    const process = withInbox(async (message: InboxMessage) => {
      if (message.id.startsWith('r') && [...running].some((id) => id.startsWith('r'))) suspectsOverlapped = true;
      if (running.size > 0) othersOverlapped = true;
      running.add(message.id);
      await new Promise((resolve) => setTimeout(resolve, 40));
      running.delete(message.id);
    }, database.options());
    const outcomes = await Promise.all(['r1', 'r2', 'r3', 'n1', 'n2'].map((id) => process({ id, payload: 1, redelivered: true })));
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'processed', 'processed', 'processed', 'processed']);
    expect(suspectsOverlapped).toBe(false);
    if (driver !== 'pglite') expect(othersOverlapped).toBe(true); // PGlite runs one transaction at a time anyway
    // Each ended without failing: only the deaths before stay counted.
    expect(await attempts()).toEqual([
      { message_id: 'r1', attempts: 1 },
      { message_id: 'r2', attempts: 1 },
      { message_id: 'r3', attempts: 1 },
    ]);
  });

  it('a batch holding a redelivery runs its messages one at a time, in order, each counted as usual', async () => {
    const calls: string[][] = [];
    const process = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        calls.push(messages.map((m) => m.id));
        if (messages.some((m) => m.id === 'bad')) throw new Error('poison');
        await tx.insert(database.t.effects).values(messages.map((m) => ({ messageId: m.id })));
      },
      database.options({ maxAttempts: 2 }),
    );
    const batch = [
      { id: 'a', payload: 1 },
      { id: 'bad', payload: 1, redelivered: true },
      { id: 'c', payload: 1 },
    ];
    expect((await process(batch)).map((o) => o.status)).toEqual(['processed', 'retry', 'processed']);
    expect(calls).toEqual([['a'], ['bad'], ['c']]);
    expect(await attempts()).toEqual([{ message_id: 'bad', attempts: 1 }]);
    expect((await process(batch)).map((o) => o.status)).toEqual(['duplicate', 'dead-letter', 'duplicate']);
    expect(await attempts()).toEqual([{ message_id: 'bad', attempts: 2 }]);
  });
});

describe('a redelivery that finds its copy busy (node-postgres)', () => {
  const database = useMigratedDatabase('node-postgres');

  it('is retried as in-progress and its count taken back', async () => {
    const { t } = database;
    const { databaseUrl } = await import('@inboxed/test-support');
    const { default: pg } = await import('pg');
    const holder = new pg.Client({ connectionString: databaseUrl() });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query(`insert into "${t.schema}".inbox (consumer, message_id, status) values ('c', 'held', 'processed')`);
      const process = withInbox(async () => {}, database.options({ lockTimeoutMs: 200 }));
      expect(await process({ id: 'held', payload: 1, redelivered: true })).toMatchObject({ status: 'retry', reason: 'in-progress' });
      expect(await t.query(`select count(*)::int as n from "${t.schema}".inbox_attempts`)).toEqual([{ n: 0 }]);
    } finally {
      await holder.query('rollback');
      await holder.end();
    }
  });
});
