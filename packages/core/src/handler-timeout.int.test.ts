import { DRIVERS, databaseUrl, gate, type TestDatabase } from '@inboxed/test-support';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { beforeEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import type { InboxMessage, InboxOutcome } from './types.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

describe.each(DRIVERS)('handlerTimeoutMs on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 4 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const attempts = () => t.query<{ attempts: number; last_error_code: string }>(`select attempts, last_error_code from "${t.schema}".inbox_attempts`);

  it('a handler that stops when its signal fires is a counted HANDLER_TIMEOUT; nothing it wrote commits', async () => {
    const process = withInbox(
      async (message: InboxMessage, tx: any, { signal }) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        await sleep(5_000, undefined, { signal }).catch(() => {});
        expect(signal.aborted).toBe(true);
      },
      database.options({ handlerTimeoutMs: 100 }),
    );
    const outcome = await process({ id: 'slow', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(outcome.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
    expect(await attempts()).toEqual([{ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_TIMEOUT }]);
    expect(await t.countEffects()).toBe(0);
  });

  it('a handler that ignores its signal is not cut off mid-write: what it writes after the deadline is rolled back with the rest', async () => {
    let afterDeadline = false;
    const process = withInbox(
      async (message: InboxMessage, tx: any) => {
        await sleep(150); // past the deadline, ignoring the signal
        afterDeadline = true;
        await tx.insert(t.effects).values({ messageId: message.id });
      },
      database.options({ handlerTimeoutMs: 100 }),
    );
    const outcome = await process({ id: 'stubborn', payload: {} });
    expect(outcome.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
    expect(afterDeadline).toBe(true);
    expect(await t.countEffects()).toBe(0);
    expect(await t.query(`select * from "${t.schema}".inbox`)).toEqual([]);
  });

  it('the consumer stopping fires the signal without failing the message; a fast handler is unaffected', async () => {
    const stop = new AbortController();
    const seen: boolean[] = [];
    const process = withInbox(
      async (message: InboxMessage, tx: any, { signal }) => {
        seen.push(signal.aborted);
        await tx.insert(t.effects).values({ messageId: message.id });
      },
      database.options({ handlerTimeoutMs: 5_000 }),
    );
    expect(await process({ id: 'fast', payload: {} }, { signal: stop.signal })).toMatchObject({ status: 'processed' });
    stop.abort();
    expect(await process({ id: 'while-stopping', payload: {} }, { signal: stop.signal })).toMatchObject({ status: 'processed' });
    expect(seen).toEqual([false, true]);
  });

  /** A handler that writes, then waits for its signal and fails with its reason, as `fetch(url, { signal })` would. */
  const honoursItsSignal = async (message: InboxMessage, tx: any, { signal }: { signal: AbortSignal }) => {
    await tx.insert(t.effects).values({ messageId: message.id });
    await sleep(10_000, undefined, { signal });
  };

  for (const handlerTimeoutMs of [null, 5_000]) {
    it(`a handler that fails on the consumer's stop is retried, not counted, and nothing it wrote commits (handlerTimeoutMs ${handlerTimeoutMs})`, async () => {
      const process = withInbox(honoursItsSignal, database.options({ handlerTimeoutMs, maxAttempts: 1 }));
      for (const redelivered of [false, true]) {
        const stop = new AbortController();
        const outcome = process({ id: `m-${redelivered}`, payload: {}, redelivered }, { signal: stop.signal });
        await sleep(100);
        stop.abort();
        // With maxAttempts 1 a counted failure would be a dead-letter: a deploy would cost the message.
        expect(await outcome).toMatchObject({ status: 'retry', reason: 'consumer-stopping', error: { code: InboxErrorCodes.CONSUMER_STOPPING } });
      }
      expect(await attempts()).toEqual([]); // the redelivery's count ahead was taken back
      expect(await t.countEffects()).toBe(0);
      expect(await t.query(`select * from "${t.schema}".inbox`)).toEqual([]);
      // After the restart the redelivery runs with its budget whole.
      const restarted = withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(t.effects).values({ messageId: message.id });
        },
        database.options({ maxAttempts: 1 }),
      );
      expect(await restarted({ id: 'm-true', payload: {}, redelivered: true })).toMatchObject({ status: 'processed' });
      expect(await t.countEffects()).toBe(1);
    });
  }

  it('a handler that failed before the stop is counted, though the stop comes while its transaction ends', async () => {
    const stop = new AbortController();
    const process = withInbox(async () => {
      globalThis.process.nextTick(() => stop.abort());
      throw new Error('a real failure, before any stop');
    }, database.options());
    expect(await process({ id: 'before', payload: {} }, { signal: stop.signal })).toMatchObject({ status: 'retry', reason: 'handler-failed' });
    expect(await attempts()).toEqual([{ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_FAILED }]);
  });

  it("a batch whose handler fails on the consumer's stop is retried whole, not counted and not split", async () => {
    const calls: string[][] = [];
    const process = withInboxBatch(
      async (messages: InboxMessage[], tx: any, { signal }) => {
        calls.push(messages.map((m) => m.id));
        await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
        await sleep(10_000, undefined, { signal });
      },
      database.options({ handlerTimeoutMs: 5_000 }),
    );
    const stop = new AbortController();
    const outcomes = process(
      ['a', 'b', 'c'].map((id) => ({ id, payload: {} })),
      { signal: stop.signal },
    );
    await sleep(100);
    stop.abort();
    expect((await outcomes).map((o) => [o.status, o.reason])).toEqual([
      ['retry', 'consumer-stopping'],
      ['retry', 'consumer-stopping'],
      ['retry', 'consumer-stopping'],
    ]);
    expect(calls).toEqual([['a', 'b', 'c']]);
    expect(await attempts()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
  });

  it('a batch that failed just before the stop starts no split after it: retried whole, uncounted, no handler run with a fired signal', async () => {
    const calls: string[][] = [];
    const stop = new AbortController();
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      calls.push(messages.map((m) => m.id));
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      if (messages.some((m) => m.id === 'poison')) {
        globalThis.process.nextTick(() => stop.abort()); // the stop comes right after this failure
        throw new Error('poison');
      }
    }, database.options());
    const outcomes = await process(
      ['a', 'poison', 'b'].map((id) => ({ id, payload: {} })),
      { signal: stop.signal },
    );
    // Before, the halves ran after the stop, and the poison's real failure there was uncounted anyway.
    expect(calls).toEqual([['a', 'poison', 'b']]);
    expect(outcomes.map((o) => [o.messageId, o.status, o.reason, o.error?.code])).toEqual([
      ['a', 'retry', 'consumer-stopping', InboxErrorCodes.CONSUMER_STOPPING],
      ['poison', 'retry', 'consumer-stopping', InboxErrorCodes.CONSUMER_STOPPING],
      ['b', 'retry', 'consumer-stopping', InboxErrorCodes.CONSUMER_STOPPING],
    ]);
    expect(await attempts()).toEqual([]);
    expect(await t.countEffects()).toBe(0);
    // The next consumer isolates the poison and counts it.
    const next = await process(['a', 'poison', 'b'].map((id) => ({ id, payload: {} })));
    expect(next.map((o) => [o.messageId, o.status])).toEqual([
      ['a', 'processed'],
      ['poison', 'retry'],
      ['b', 'processed'],
    ]);
    expect(await attempts()).toEqual([{ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_FAILED }]);
  });

  it('a suspect waiting for its turn after the stop is not started: retried uncounted, its neighbours before it kept', async () => {
    const stop = new AbortController();
    await t.query(
      `insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('${database.options().consumer}', 's', 1, 'HANDLER_FAILED')`,
    );
    const calls: string[][] = [];
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      calls.push(messages.map((m) => m.id));
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      stop.abort(); // the stop comes while the first transaction runs
    }, database.options());
    const outcomes = await process(
      [
        { id: 'a', payload: {} },
        { id: 's', payload: {}, redelivered: true },
      ],
      { signal: stop.signal },
    );
    expect(calls).toEqual([['a']]);
    expect(outcomes.map((o) => [o.messageId, o.status, o.reason])).toEqual([
      ['a', 'processed', undefined],
      ['s', 'retry', 'consumer-stopping'],
    ]);
    expect(await attempts()).toEqual([{ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_FAILED }]);
  });

  it.each(['withInbox', 'withInboxBatch'] as const)(
    "%s: a suspect waiting in the lane behind another call's suspect starts nothing once the stop fired; its count is untouched",
    async (mode) => {
      const consumer = database.options().consumer;
      for (const id of ['s1', 's2']) {
        await t.query(
          `insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts, last_error_code) values ('${consumer}', '${id}', 1, 'HANDLER_FAILED')`,
        );
      }
      const stop = new AbortController();
      const ran: string[] = [];
      const first = gate();
      const write = async (ids: string[], tx: any) => {
        ran.push(...ids);
        if (ids.includes('s1')) {
          first.entered();
          await first.held; // a slow suspect holds the lane
        }
        await tx.insert(t.effects).values(ids.map((messageId) => ({ messageId })));
      };
      const suspect = (id: string) => ({ id, payload: {}, redelivered: true });
      let firstCall: Promise<unknown>;
      let second: Promise<InboxOutcome>;
      if (mode === 'withInbox') {
        const process = withInbox(async (message: InboxMessage, tx: any) => write([message.id], tx), database.options());
        firstCall = process(suspect('s1'), { signal: stop.signal });
        await first.inside;
        second = process(suspect('s2'), { signal: stop.signal });
      } else {
        const process = withInboxBatch(
          async (messages: InboxMessage[], tx: any) =>
            write(
              messages.map((m) => m.id),
              tx,
            ),
          database.options(),
        );
        firstCall = process([suspect('s1')], { signal: stop.signal });
        await first.inside;
        second = process([suspect('s2')], { signal: stop.signal }).then((outcomes) => outcomes[0]!);
      }
      await sleep(100); // s2 is waiting for the lane
      stop.abort();
      first.release();
      await firstCall;
      expect(await second).toMatchObject({ status: 'retry', reason: 'consumer-stopping', error: { code: InboxErrorCodes.CONSUMER_STOPPING } });
      expect(ran).toEqual(['s1']);
      expect(await t.query(`select message_id, attempts from "${t.schema}".inbox_attempts order by 1`)).toEqual([
        { message_id: 's1', attempts: 1 }, // its own attempt, counted at its turn, taken back once it committed
        { message_id: 's2', attempts: 1 },
      ]);
    },
  );

  it('a handler that ignores the stop and runs past handlerTimeoutMs is still a counted HANDLER_TIMEOUT', async () => {
    const process = withInbox(
      async () => {
        await sleep(400);
      },
      database.options({ handlerTimeoutMs: 150 }),
    );
    const stop = new AbortController();
    const outcome = process({ id: 'slow', payload: {} }, { signal: stop.signal });
    await sleep(50);
    stop.abort();
    expect(await outcome).toMatchObject({ status: 'retry', error: { code: InboxErrorCodes.HANDLER_TIMEOUT } });
    expect(await attempts()).toEqual([{ attempts: 1, last_error_code: InboxErrorCodes.HANDLER_TIMEOUT }]);
  });

  it('withInboxBatch: a batch handler past the deadline is counted for its messages, split down to singles', async () => {
    const process = withInboxBatch(
      async (messages: InboxMessage[], _tx: any, { signal }) => {
        if (messages.some((m) => m.id === 'slow')) await sleep(5_000, undefined, { signal }).catch(() => {});
      },
      database.options({ handlerTimeoutMs: 100 }),
    );
    const outcomes = await process(['a', 'slow', 'b'].map((id) => ({ id, payload: {} })));
    expect(outcomes.map((o) => [o.messageId, o.status, o.error?.code])).toEqual([
      ['a', 'processed', undefined],
      ['slow', 'retry', InboxErrorCodes.HANDLER_TIMEOUT],
      ['b', 'processed', undefined],
    ]);
  });

  it('a handler that hangs past a second deadline is abandoned; its transaction ends, so its later writes fail', async () => {
    let release!: () => void;
    const hung = new Promise<void>((resolve) => (release = resolve));
    let lateWrite: unknown;
    const process = withInbox(
      async (message: InboxMessage, tx: any) => {
        await hung;
        try {
          await tx.insert(t.effects).values({ messageId: message.id });
          lateWrite = 'committed?';
        } catch (error) {
          lateWrite = error;
        }
      },
      database.options({ handlerTimeoutMs: 100 }),
    );
    const started = Date.now();
    const outcome = await process({ id: 'hung', payload: {} });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(outcome.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
    release();
    await sleep(100);
    // Refused (postgres-js, PGlite) or failed on the cut connection (node-postgres).
    expect(lateWrite).toBeInstanceOf(Error);
    expect(await t.countEffects()).toBe(0);
    // The pool still works: a cut connection was discarded, not reused.
    const next = withInbox(async (message: InboxMessage, tx: any) => void (await tx.insert(t.effects).values({ messageId: message.id })), database.options());
    expect(await next({ id: 'after', payload: {} })).toMatchObject({ status: 'processed' });
  });
});

/**
 * One connection, so the delivery after an abandoned one runs on the abandoned one's connection. On
 * postgres-js a savepoint whose callback fails is rolled back by postgres-js itself, with a
 * `ROLLBACK TO` sent on that connection whenever the callback fails: abandoned with it still open,
 * that statement would reach the next delivery's transaction, undoing its savepoint's writes while
 * it reports `processed`.
 */
describe.each(DRIVERS)('a handler abandoned inside a savepoint, on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 1 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const effects = async () => (await t.query<{ value: string }>(`select value from "${t.schema}".effects order by id`)).map((r) => r.value);

  it('never reaches the next delivery on its connection: what that one commits is what it reports', async () => {
    const hung = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.transaction(async (savepoint: any) => {
          await savepoint.insert(t.effects).values({ messageId: message.id, value: 'hung' });
          await sleep(500); // ignores its signal, past both deadlines
          await savepoint.insert(t.effects).values({ messageId: message.id, value: 'hung, late' });
          throw new Error('the savepoint fails late');
        });
      },
      database.options({ handlerTimeoutMs: 100, consumer: 'hung' }),
    );
    const next = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.transaction((savepoint: any) => savepoint.insert(t.effects).values({ messageId: message.id, value: 'next, in its savepoint' }));
        await sleep(700); // the hung handler's savepoint fails meanwhile, if it still can
        await tx.insert(t.effects).values({ messageId: message.id, value: 'next' });
      },
      database.options({ consumer: 'next' }),
    );
    const abandoned = await hung({ id: 'hung', payload: {} });
    expect(abandoned.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
    expect(await next({ id: 'next', payload: {} })).toMatchObject({ status: 'processed' });
    expect(await effects()).toEqual(['next, in its savepoint', 'next']);
    expect(await t.query(`select consumer, message_id from "${t.schema}".inbox`)).toEqual([{ consumer: 'next', message_id: 'next' }]);
  });
});

/**
 * A handler stuck in a statement the server is still running (a lock wait, a long query) ignores its
 * signal by necessity: it cannot return until the statement does. Abandoned, that statement is
 * cancelled on the server, so neither the delivery nor its connection waits for it, and the message
 * can be retried at once. PGlite runs statements on the event loop's thread: its deadline cannot fire
 * during one (see the README).
 */
describe.each(DRIVERS.filter((d) => d !== 'pglite'))('a handler abandoned in a running statement, on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 1 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });
  const stillRunning = (marker: string) => t.query(`select pid from pg_stat_activity where query like '%${marker}%' and query not like '%pg_stat_activity%'`);

  for (const where of ['on tx', 'in a savepoint'] as const) {
    it(`${where}: the statement is cancelled, and the delivery and its connection are free at once`, async () => {
      const marker = `inboxed-hung-${where.replaceAll(' ', '-')}`;
      const hung = sql.raw(`select pg_sleep(30) /* ${marker} */`);
      let seen: unknown;
      const process = withInbox(
        async (message: InboxMessage, tx: any) => {
          await tx.insert(t.effects).values({ messageId: message.id, value: 'before the hung statement' });
          try {
            if (where === 'on tx') await tx.execute(hung);
            else await tx.transaction((savepoint: any) => savepoint.execute(hung));
          } catch (error) {
            seen = error;
            throw error;
          }
        },
        database.options({ handlerTimeoutMs: 150 }),
      );
      const started = Date.now();
      const abandoned = await process({ id: 'hung', payload: {} });
      // Well before the statement would have ended on its own.
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(abandoned).toMatchObject({ status: 'retry', reason: 'handler-failed' });
      expect(abandoned.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
      // Cancelled on the server (node-postgres sends the cancel as it cuts the connection).
      await vi.waitFor(async () => expect(await stillRunning(marker)).toEqual([]));
      // The handler got its statement's error instead of waiting for it.
      await vi.waitFor(() => expect(seen).toBeInstanceOf(Error));
      expect(await t.countEffects()).toBe(0);
      expect(await t.query(`select attempts, last_error_code from "${t.schema}".inbox_attempts`)).toEqual([
        { attempts: 1, last_error_code: InboxErrorCodes.HANDLER_TIMEOUT },
      ]);
      // The retry runs on the same (only) connection, and commits.
      const retry = withInbox(
        async (message: InboxMessage, tx: any) => void (await tx.insert(t.effects).values({ messageId: message.id, value: 'retried' })),
        database.options(),
      );
      expect(await retry({ id: 'hung', payload: {} })).toMatchObject({ status: 'processed' });
      expect(await t.query(`select value from "${t.schema}".effects`)).toEqual([{ value: 'retried' }]);
    });
  }

  /** The next delivery on the (only) connection, after an abandoned one: it must commit exactly what it reports. */
  const nextDelivery = (id: string) =>
    withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.execute(sql`select pg_sleep(0.2)`); // a statement a stray cancel would hit
        await tx.insert(t.effects).values({ messageId: message.id, value: 'next' });
      },
      database.options({ consumer: 'next' }),
    )({ id, payload: {} });

  // postgres-js pipelines a plain statement behind the hung one, and queues a parameterised one
  // (described first) unsent: cancelling either would wedge the transaction's queue or reach the next user.
  const inFlight = {
    'a statement pipelined behind it': (tx: any) => Promise.all([tx.execute(sql.raw('select pg_sleep(30)')), tx.execute(sql.raw('select 1'))]),
    'a parameterised statement queued behind it': (tx: any) => Promise.all([tx.execute(sql`select pg_sleep(${30})`), tx.execute(sql.raw('select 1'))]),
    'both inside a savepoint': (tx: any) =>
      tx.transaction((savepoint: any) =>
        Promise.all([savepoint.execute(sql`select pg_sleep(${30})`), savepoint.insert(t.effects).values({ messageId: 'hung' })]),
      ),
  };
  for (const [shape, statements] of Object.entries(inFlight)) {
    it(`with ${shape}: the delivery ends, and the next delivery on its connection is untouched`, async () => {
      const process = withInbox(
        async (_message: InboxMessage, tx: any) => void (await statements(tx)),
        database.options({ handlerTimeoutMs: 100, consumer: 'hung' }),
      );
      const abandoned = await process({ id: 'hung', payload: {} });
      expect(abandoned.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
      expect(await nextDelivery('next')).toMatchObject({ status: 'processed' });
      expect(await t.query(`select message_id, value from "${t.schema}".effects`)).toEqual([{ message_id: 'next', value: 'next' }]);
      expect(await t.query(`select consumer, message_id from "${t.schema}".inbox_attempts`)).toEqual([{ consumer: 'hung', message_id: 'hung' }]);
    });
  }

  it('a statement that ends as its handler is abandoned, the process busy across that moment: the cancel never reaches the next user of the connection', async () => {
    const timeoutMs = 100;
    // A connection of its own for the timing statement: the tested pool has one, held by the deliveries.
    const timing = new pg.Client({ connectionString: databaseUrl() });
    await timing.connect();
    onTestFinished(() => timing.end());
    for (let i = 0; i < 5; i++) {
      // The statement ends at 1.5 deadlines, before the abandonment at 2; but the process is busy from
      // 1.4 to 2.3, so the abandonment runs before its answer is read, and cancels a finished statement.
      const process = withInbox(
        async (_message: InboxMessage, tx: any) => void (await tx.execute(sql.raw(`select pg_sleep(${(1.5 * timeoutMs) / 1000})`))),
        database.options({ handlerTimeoutMs: timeoutMs, consumer: 'hung' }),
      );
      const abandoned = process({ id: `hung-${i}`, payload: {} });
      // From an I/O callback, so the abandonment's timer runs before the poll phase reads the answer.
      void timing.query(`select pg_sleep(${(1.4 * timeoutMs) / 1000})`).then(() => {
        const until = Date.now() + 0.9 * timeoutMs;
        while (Date.now() < until);
      });
      const [first, next] = await Promise.all([abandoned, nextDelivery(`next-${i}`)]);
      expect(first.error?.code).toBe(InboxErrorCodes.HANDLER_TIMEOUT);
      expect(next).toMatchObject({ status: 'processed' });
    }
    expect(await t.query(`select count(*)::int as n from "${t.schema}".effects where message_id like 'next-%'`)).toEqual([{ n: 5 }]);
    expect(await t.query(`select count(*)::int as n from "${t.schema}".inbox_attempts where consumer = 'next'`)).toEqual([{ n: 0 }]);
  });
});
