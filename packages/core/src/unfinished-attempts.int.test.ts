// Redelivered messages have their attempt counted before the handler runs, so a message that
// kills the process is still counted (the kill itself is tested in test/fault/core-crash.test.ts).
// Here: the count an attempt ends with is the same as without the flag, on every driver.
import { DRIVERS, gate } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
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

  /** A batch processor writing one effect per message, failing any call that holds `bad`; `calls` records each call's ids. */
  const recordingBatch = (options: Parameters<typeof database.options>[0] = {}) => {
    const calls: string[][] = [];
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      calls.push(messages.map((m) => m.id));
      if (messages.some((m) => m.id === 'bad')) throw new Error('poison');
      await tx.insert(database.t.effects).values(messages.map((m) => ({ messageId: m.id })));
    }, database.options(options));
    return { calls, process };
  };

  it("a batch's first-time redeliveries run with its other messages in one transaction, counted ahead; a failure splits as usual", async () => {
    const { calls, process } = recordingBatch({ maxAttempts: 2 });
    const batch = [
      { id: 'a', payload: 1 },
      { id: 'bad', payload: 1, redelivered: true },
      { id: 'c', payload: 1, redelivered: true },
    ];
    expect((await process(batch)).map((o) => o.status)).toEqual(['processed', 'retry', 'processed']);
    expect(calls).toEqual([['a', 'bad', 'c'], ['a', 'bad'], ['a'], ['bad'], ['c']]);
    // c's count was taken back when it committed; bad's failure stays, counted once.
    expect(await attempts()).toEqual([{ message_id: 'bad', attempts: 1 }]);
    calls.length = 0;
    const again = batch.map((m) => ({ ...m, redelivered: true }));
    expect((await process(again)).map((o) => o.status)).toEqual(['duplicate', 'dead-letter', 'duplicate']);
    expect(calls).toEqual([['bad']]);
    expect(await attempts()).toEqual([{ message_id: 'bad', attempts: 2 }]);
    expect(await database.t.countEffects()).toBe(2);
  });

  it('while a batch runs, each first-time redelivery in it is counted once: what a death there leaves behind', async () => {
    let during: unknown[] = [];
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      // Read in the handler's transaction (PGlite has one connection): the counts were committed before it began.
      const read = await tx.execute(sql.raw(`select message_id, attempts from "${database.t.schema}".inbox_attempts order by 1`));
      during = Array.isArray(read) ? [...read] : read.rows;
      await tx.insert(database.t.effects).values(messages.map((m) => ({ messageId: m.id })));
    }, database.options());
    const outcomes = await process(['x', 'y', 'z'].map((id) => ({ id, payload: 1, redelivered: id !== 'y' })));
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'processed', 'processed']);
    expect(during).toEqual([
      { message_id: 'x', attempts: 1 },
      { message_id: 'z', attempts: 1 },
    ]);
    expect(await attempts()).toEqual([]);
  });

  it('redeliveries that failed or died before run alone, in order, splitting the batch where they stand', async () => {
    await database.t.query(
      `insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('c', 's1', 1, 'ATTEMPT_UNFINISHED'), ('c', 's2', 1, 'ATTEMPT_UNFINISHED')`,
    );
    const { calls, process } = recordingBatch();
    const ids = ['a', 'b', 's1', 'c', 's2', 'd'];
    const outcomes = await process(ids.map((id) => ({ id, payload: 1, redelivered: id !== 'b' })));
    expect(outcomes.map((o) => o.status)).toEqual(ids.map(() => 'processed'));
    expect(calls).toEqual([['a', 'b'], ['s1'], ['c'], ['s2'], ['d']]);
    // Only the deaths before stay counted.
    expect(await attempts()).toEqual([
      { message_id: 's1', attempts: 1 },
      { message_id: 's2', attempts: 1 },
    ]);
  });

  it('while a suspect runs alone, nothing after it in the batch is counted yet: a death then charges the suspect only', async () => {
    await database.t.query(
      `insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('c', 's1', 1, 'ATTEMPT_UNFINISHED'), ('c', 's2', 1, 'ATTEMPT_UNFINISHED')`,
    );
    const during = new Map<string, unknown[]>();
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      // Read in the handler's transaction (PGlite has one connection).
      const read = await tx.execute(sql.raw(`select message_id, attempts from "${database.t.schema}".inbox_attempts order by 1`));
      during.set(messages.map((m) => m.id).join(','), Array.isArray(read) ? [...read] : read.rows);
      await tx.insert(database.t.effects).values(messages.map((m) => ({ messageId: m.id })));
    }, database.options());
    const ids = ['a', 's1', 'b', 'c', 's2', 'd'];
    const outcomes = await process(ids.map((id) => ({ id, payload: 1, redelivered: id !== 'c' })));
    expect(outcomes.map((o) => o.status)).toEqual(ids.map(() => 'processed'));
    // Before, b and d were counted when the call began, so a death while s1 or s2 ran charged them too.
    expect(Object.fromEntries(during)).toEqual({
      a: [
        { message_id: 'a', attempts: 1 },
        { message_id: 's1', attempts: 1 },
        { message_id: 's2', attempts: 1 },
      ],
      s1: [
        { message_id: 's1', attempts: 2 },
        { message_id: 's2', attempts: 1 },
      ],
      'b,c': [
        { message_id: 'b', attempts: 1 },
        { message_id: 's1', attempts: 1 },
        { message_id: 's2', attempts: 1 },
      ],
      s2: [
        { message_id: 's1', attempts: 1 },
        { message_id: 's2', attempts: 2 },
      ],
      d: [
        { message_id: 'd', attempts: 1 },
        { message_id: 's1', attempts: 1 },
        { message_id: 's2', attempts: 1 },
      ],
    });
    expect(await attempts()).toEqual([
      { message_id: 's1', attempts: 1 },
      { message_id: 's2', attempts: 1 },
    ]);
  });

  it('a suspect whose attempts are spent is dead-lettered without running, and the batch around it runs', async () => {
    await database.t.query(
      `insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('c', 'spent', 2, 'ATTEMPT_UNFINISHED')`,
    );
    const { calls, process } = recordingBatch({ maxAttempts: 2 });
    const outcomes = await process(['a', 'spent', 'b'].map((id) => ({ id, payload: 1, redelivered: true })));
    expect(outcomes.map((o) => [o.status, o.reason])).toEqual([
      ['processed', undefined],
      ['dead-letter', 'max-attempts-exceeded'],
      ['processed', undefined],
    ]);
    expect(calls).toEqual([['a'], ['b']]);
    expect(await attempts()).toEqual([{ message_id: 'spent', attempts: 2 }]);
  });

  it('a copy flagged redelivered makes its id a redelivery, whichever copy of the batch leads', async () => {
    await database.t.query(`insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts) values ('c', 's', 1)`);
    const { calls, process } = recordingBatch();
    const outcomes = await process([
      { id: 'a', payload: 1 },
      { id: 's', payload: 1 },
      { id: 's', payload: 1, redelivered: true },
      { id: 'b', payload: 1 },
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'processed', 'duplicate', 'processed']);
    // s failed or died before: it runs alone, and only that earlier death stays counted.
    expect(calls).toEqual([['a'], ['s'], ['b']]);
    expect(await attempts()).toEqual([{ message_id: 's', attempts: 1 }]);
  });

  it('the heartbeat is awaited between the transactions of one call, never before the first', async () => {
    await database.t.query(`insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts) values ('c', 's', 1)`);
    const { calls, process } = recordingBatch();
    const log: string[] = [];
    const heartbeat = async () => {
      log.push(`beat after ${calls.length}`);
    };
    await process([{ id: 'a', payload: 1 }], { heartbeat });
    expect(log).toEqual([]);
    calls.length = 0;
    const outcomes = await process(
      ['b', 's', 'bad', 'c'].map((id) => ({ id, payload: 1, redelivered: id === 's' })),
      { heartbeat },
    );
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'processed', 'retry', 'processed']);
    // b | s | bad,c split into bad | c
    expect(calls).toEqual([['b'], ['s'], ['bad', 'c'], ['bad'], ['c']]);
    expect(log).toEqual(['beat after 1', 'beat after 2', 'beat after 3', 'beat after 4']);
  });

  it('a heartbeat that rejects in the middle of a split leaves no count behind: the half that ran is settled, the other never started', async () => {
    const { calls, process } = recordingBatch();
    let beats = 0;
    const outcomes = await process(
      ['a', 'bad'].map((id) => ({ id, payload: 1, redelivered: true })),
      {
        heartbeat: async () => {
          if (++beats === 2) throw new Error('REBALANCE_IN_PROGRESS');
        },
      },
    );
    expect(calls).toEqual([['a', 'bad'], ['a']]);
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'retry']);
    expect(outcomes[1]!.error!.message).toMatch(/heartbeat failed/);
    expect(await attempts()).toEqual([]);
    expect(await database.t.countEffects()).toBe(1);
  });

  it('a heartbeat that rejects stops the call: what committed stays, the rest is retried uncounted, and their counts are taken back', async () => {
    await database.t.query(`insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts) values ('c', 's', 1)`);
    const { calls, process } = recordingBatch();
    const outcomes = await process(
      ['a', 's', 'b'].map((id) => ({ id, payload: 1, redelivered: true })),
      {
        heartbeat: async () => {
          throw new Error('REBALANCE_IN_PROGRESS');
        },
      },
    );
    expect(calls).toEqual([['a']]);
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'retry', 'retry']);
    expect(outcomes[1]).toMatchObject({ reason: 'internal-error', error: { code: InboxErrorCodes.INTERNAL_ERROR } });
    expect(outcomes[1]!.error!.message).toMatch(/heartbeat failed.*REBALANCE_IN_PROGRESS/);
    expect(await database.t.countEffects()).toBe(1);
    // s keeps its earlier record, untouched; b never ran, so its count ahead was taken back.
    expect(await attempts()).toEqual([{ message_id: 's', attempts: 1 }]);
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

describe('a spent redelivery whose wait for a claim loses its connection (node-postgres)', () => {
  const database = useMigratedDatabase('node-postgres');

  it('is an uncounted outage retry, and the process sees no unhandled connection error', async () => {
    const { t } = database;
    const { databaseUrl } = await import('@inboxed/test-support');
    const { default: pg } = await import('pg');
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    await t.query(`insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('c', 'held', 1, 'ATTEMPT_UNFINISHED')`);
    const holder = new pg.Client({ connectionString: databaseUrl() });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query(`insert into "${t.schema}".inbox (consumer, message_id, status) values ('c', 'held', 'processed')`);
      const run = withInbox(async () => {}, database.options({ maxAttempts: 1, lockTimeoutMs: null }));
      const outcome = run({ id: 'held', payload: 1, redelivered: true });
      let waiting: { pid: number }[] = [];
      for (let i = 0; i < 300 && waiting.length === 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        waiting = await t.query<{ pid: number }>(
          // This test's schema only: tests of other files run at the same time and wait on their own claims.
          `select pid from pg_stat_activity where wait_event_type = 'Lock' and position('insert into' in query) > 0 and position('${t.schema}' in query) > 0 and pid <> pg_backend_pid()`,
        );
      }
      await t.query(`select pg_terminate_backend(${waiting[0]!.pid})`);
      // Drizzle's own transaction left the checked-out client without an 'error' listener: Node crashed.
      expect(await outcome).toMatchObject({ status: 'retry', reason: 'database-unavailable' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(uncaught).toEqual([]);
      expect(await t.query(`select attempts from "${t.schema}".inbox_attempts`)).toEqual([{ attempts: 1 }]);
    } finally {
      process.off('uncaughtException', onUncaught);
      await holder.query('rollback');
      await holder.end();
    }
  });
});

describe.each(DRIVERS.filter((driver) => driver !== 'pglite'))('copies of one redelivered id settling at once on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  const attempts = () =>
    database.t.query<{ message_id: string; attempts: number }>(`select message_id, attempts from "${database.t.schema}".inbox_attempts order by 1`);
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** Resolves once `n` other sessions wait on a lock in a statement containing `text`. */
  const waitingOn = async (text: string, n: number) => {
    for (let i = 0; i < 300; i++) {
      const rows = await database.t.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and position('${text}' in query) > 0 and position('${database.t.schema}' in query) > 0 and pid <> pg_backend_pid()`,
      );
      if (rows[0]!.n >= n) return;
      await sleep(10);
    }
    throw new Error(`never saw ${n} sessions waiting on ${text}`);
  };

  it('two take-backs of one id counted twice, overlapping, leave no count behind', async () => {
    const { InboxStore } = await import('./inbox-store.js');
    const { resolveOptions } = await import('./options.js');
    const { databaseUrl } = await import('@inboxed/test-support');
    const { default: pg } = await import('pg');
    const resolved = resolveOptions(database.options());
    const store = new InboxStore(resolved.tables, resolved.consumer);
    // Two copies in flight counted x: 2.
    await store.startFirstAttempts(resolved.db, ['x']);
    await store.startAttempt(resolved.db, 'x');
    expect(await attempts()).toEqual([{ message_id: 'x', attempts: 2 }]);
    // An outside session holds the row so that both take-backs start before either ends.
    const holder = new pg.Client({ connectionString: databaseUrl() });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query(`select 1 from "${database.t.schema}".inbox_attempts where message_id = 'x' for update`);
      const both = Promise.all([store.uncountAttempts(resolved.db, ['x']), store.uncountAttempts(resolved.db, ['x'])]);
      await waitingOn('inbox_attempts', 2);
      await holder.query('commit');
      await both;
    } finally {
      await holder.end();
    }
    // Before, the second judged the row by its snapshot (2), waited, then found 1 > 1 false: x stayed at 1.
    expect(await attempts()).toEqual([]);
  });

  /** A processor whose handler holds its transaction (claim taken, not committed) until released, then writes or throws. */
  const heldCopy = (outcome: 'write' | 'throw') => {
    const { held, release, inside, entered } = gate();
    const process = withInbox(
      async (message: InboxMessage, tx: any) => {
        entered();
        await held;
        if (outcome === 'throw') throw new Error('the first copy fails');
        await tx.insert(database.t.effects).values({ messageId: message.id });
      },
      database.options({ maxAttempts: 1 }),
    );
    return { process, inside, release };
  };

  it('with maxAttempts 1, a redelivered copy beside one that processes the message waits for it and is a duplicate, not a dead-letter', async () => {
    const first = heldCopy('write');
    const one = first.process({ id: 'x', payload: 1, redelivered: true });
    await first.inside;
    // The first copy's count ahead (1) makes this one a suspect, counted to 2 > maxAttempts at its turn.
    const single = withInbox(async () => {}, database.options({ maxAttempts: 1 }));
    const batch = withInboxBatch(async () => {}, database.options({ maxAttempts: 1 }));
    const two = single({ id: 'x', payload: 1, redelivered: true });
    const three = batch([
      { id: 'x', payload: 1, redelivered: true },
      { id: 'y', payload: 1, redelivered: true },
    ]);
    await waitingOn('insert into', 2);
    first.release();
    const [a, b, c] = await Promise.all([one, two, three]);
    expect(a.status).toBe('processed');
    // Before, both were dead-lettered (max-attempts-exceeded) while the first copy committed the effect.
    expect(b.status).toBe('duplicate');
    expect(c.map((o) => o.status)).toEqual(['duplicate', 'processed']);
    expect(await database.t.countEffects('x')).toBe(1);
    expect(await attempts()).toEqual([]);
  });

  it('with maxAttempts 1, a redelivered copy beside one that fails is dead-lettered once that copy rolled back', async () => {
    const first = heldCopy('throw');
    const one = first.process({ id: 'x', payload: 1, redelivered: true });
    await first.inside;
    const ran: string[] = [];
    const second = withInbox(
      async (message: InboxMessage) => {
        ran.push(message.id);
      },
      database.options({ maxAttempts: 1 }),
    );
    const two = second({ id: 'x', payload: 1, redelivered: true });
    await waitingOn('insert into', 1);
    first.release();
    const [a, b] = await Promise.all([one, two]);
    expect([a.status, a.reason]).toEqual(['dead-letter', 'max-attempts-exceeded']);
    expect([b.status, b.reason]).toEqual(['dead-letter', 'max-attempts-exceeded']);
    expect(ran).toEqual([]);
    expect(await database.t.countEffects('x')).toBe(0);
    // The failed attempt stays counted; the second copy's, which never ran, was taken back.
    expect(await attempts()).toEqual([{ message_id: 'x', attempts: 1 }]);
  });

  it('a spent redelivery whose id is claimed past lockTimeoutMs is retried as in-progress, not dead-lettered, its count taken back', async () => {
    const { databaseUrl } = await import('@inboxed/test-support');
    const { default: pg } = await import('pg');
    await database.t.query(
      `insert into "${database.t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('c', 'held', 1, 'ATTEMPT_UNFINISHED')`,
    );
    const holder = new pg.Client({ connectionString: databaseUrl() });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query(`insert into "${database.t.schema}".inbox (consumer, message_id, status) values ('c', 'held', 'processed')`);
      const process = withInbox(async () => {}, database.options({ maxAttempts: 1, lockTimeoutMs: 200 }));
      expect(await process({ id: 'held', payload: 1, redelivered: true })).toMatchObject({
        status: 'retry',
        reason: 'in-progress',
        error: { code: InboxErrorCodes.LOCK_TIMEOUT },
      });
      expect(await attempts()).toEqual([{ message_id: 'held', attempts: 1 }]);
    } finally {
      await holder.query('rollback');
      await holder.end();
    }
  });

  it('a redelivery counted ahead that finds its id committed with another payload (conflict) leaves no count', async () => {
    const { held, release, inside, entered } = gate();
    const write = async (messages: InboxMessage[], tx: any) => {
      await tx.insert(database.t.effects).values(messages.map((m) => ({ messageId: m.id })));
    };
    const first = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      entered();
      await held;
      await write(messages, tx);
    }, database.options());
    const second = withInboxBatch(write, database.options());
    const one = first([{ id: 'x', payload: 1, redelivered: true }]);
    await inside;
    // x is counted by the first copy and claimed, not committed: the second waits on the claim.
    const two = second([
      { id: 'x', payload: 2, redelivered: true },
      { id: 'y', payload: 2, redelivered: true },
    ]);
    await waitingOn('insert into', 1);
    release();
    const [a, b] = await Promise.all([one, two]);
    expect(a.map((o) => o.status)).toEqual(['processed']);
    expect(b.map((o) => o.status)).toEqual(['conflict', 'processed']);
    expect(await database.t.countEffects()).toBe(2);
    expect(await attempts()).toEqual([]);
  });
});
