import net from 'node:net';
import { DRIVERS, POSTGRES_JS_MAJOR, type TestDatabase } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { deadLetterHeaders } from './adapter/outcomes.js';
import { InboxError, InboxErrorCodes } from './errors.js';
import { storeResult } from './stored-result.js';
import { reject, type InboxMessage, type InboxOutcome } from './types.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

/** A port nothing listens on (fetch refuses "bad ports" such as 1 before connecting). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}
const deadApiPort = await closedPort();

/** A real `fetch` to a closed port: its cause chain carries ECONNREFUSED, like a handler's call to a dead API. */
async function callDeadApi(): Promise<never> {
  try {
    await fetch(`http://127.0.0.1:${deadApiPort}/charge`);
  } catch (error) {
    if ((error as { cause?: { code?: string } }).cause?.code !== 'ECONNREFUSED') throw new Error(`expected ECONNREFUSED, got ${String(error)}`);
    throw error;
  }
  throw new Error('the dead API answered');
}

describe.each(DRIVERS)('what counts as whose failure, on %s', (driver) => {
  const database = useMigratedDatabase(driver, { poolSize: 4 });
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  const options = (extra: Record<string, unknown> = {}) => database.options({ maxAttempts: 2, ...extra });
  const attempts = () =>
    t.query<{ message_id: string; attempts: number; last_error: string; last_error_code: string }>(
      `select message_id, attempts, last_error, last_error_code from "${t.schema}".inbox_attempts order by 1`,
    );

  it("a handler's call to a dead API (ECONNREFUSED in its cause chain) is the handler's failure: counted, then dead-lettered", async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      await callDeadApi();
    }, options());
    const first = await process({ id: 'api', payload: {} });
    expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(first.error?.code).toBe(InboxErrorCodes.HANDLER_FAILED);
    expect(await process({ id: 'api', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded', attempt: 2 });
    expect(await t.countEffects()).toBe(0);
  });

  it('withInboxBatch: a dead API for one message splits the batch; its neighbours commit', async () => {
    const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      if (messages.some((m) => m.id === 'b')) await callDeadApi();
    }, options());
    const outcomes = await process(['a', 'b', 'c'].map((id) => ({ id, payload: {} })));
    expect(outcomes.map((o) => [o.messageId, o.status, o.reason])).toEqual([
      ['a', 'processed', undefined],
      ['b', 'retry', 'handler-failed'],
      ['c', 'processed', undefined],
    ]);
    expect(await t.countEffects()).toBe(2);
  });

  it('a handler whose error text carries NUL or a lone surrogate is still counted, and the text is stored made safe', async () => {
    const process = withInbox(async (message: InboxMessage) => {
      throw new InboxError(`CODE\u0000${message.id}`, `bad byte \u0000 and half a pair \uD800 in ${message.id}`);
    }, options());
    expect(await process({ id: 'nul', payload: {} })).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(await process({ id: 'nul', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded', attempt: 2 });
    const [row] = await attempts();
    expect(row).toMatchObject({ message_id: 'nul', attempts: 2, last_error_code: 'CODE\uFFFDnul' });
    expect(row!.last_error).toContain('bad byte \uFFFD and half a pair \uFFFD');
  });

  it('a payload with a NUL character (valid JSON "\\u0000") that PostgreSQL refuses in text is a counted failure, not an endless outage', async () => {
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: (message.payload as { note: string }).note }); // a text column: PostgreSQL refuses NUL
    }, options());
    const poison = { id: 'nul-text', payload: JSON.parse('{"note":"a\\u0000b"}') };
    const first = await process(poison);
    expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
    expect(await process(poison)).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
    expect((await attempts())[0]).toMatchObject({ attempts: 2 });
  });

  it("a handler that makes its transaction read-only breaks inboxed's own result and rejection writes: counted, then dead-lettered, never an uncounted loop", async () => {
    const readOnly = (tx: any) => tx.execute(sql`set transaction read only`);
    const storing = withInbox(async (_message: InboxMessage, tx: any) => {
      await readOnly(tx);
      return storeResult({ ok: true });
    }, options());
    const rejecting = withInbox(async (_message: InboxMessage, tx: any) => {
      await readOnly(tx);
      return reject('not-allowed');
    }, options());
    const batch = withInboxBatch(async (_messages: InboxMessage[], tx: any) => {
      await readOnly(tx);
      return { 'ro-batch': reject('not-allowed') };
    }, options());
    for (const [id, process] of [
      ['ro-result', storing],
      ['ro-reject', rejecting],
      ['ro-batch', async (message: InboxMessage) => (await batch([message]))[0]!],
    ] as const) {
      expect(await process({ id, payload: {} })).toMatchObject({ status: 'retry', reason: 'handler-failed', error: { code: 'HANDLER_FAILED' } });
      expect(await process({ id, payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
    }
    expect((await attempts()).map((row) => [row.message_id, row.attempts])).toEqual([
      ['ro-batch', 2],
      ['ro-reject', 2],
      ['ro-result', 2],
    ]);
    expect(await t.query(`select message_id from "${t.schema}".inbox`)).toEqual([]);
  });

  it('a hand-made look-alike of a stored result (raw NUL, not JSON, over 64 KiB) is a counted INVALID_RESULT, never stored', async () => {
    const forged = {
      nul: { kind: 'inboxed.result', json: 'a\u0000b' },
      'not-json': { kind: 'inboxed.result', json: 'not json' },
      huge: { kind: 'inboxed.result', json: JSON.stringify('x'.repeat(300_000)) },
    };
    for (const [id, returned] of Object.entries(forged)) {
      const process = withInbox(async () => returned as never, options());
      expect(await process({ id, payload: {} })).toMatchObject({ status: 'retry', error: { code: 'INVALID_RESULT' } });
      expect(await process({ id, payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
    }
    expect(await t.query(`select message_id from "${t.schema}".inbox`)).toEqual([]);
  });

  it('a handler that leaves its session read-only does not stop the messages after it on that connection', async () => {
    const poisoning = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      await tx.execute(sql`set session characteristics as transaction read only`);
    }, options());
    const innocent = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
    }, options());
    try {
      expect(await poisoning({ id: 'poisoner', payload: {} })).toMatchObject({ status: 'processed' });
      for (const id of ['after-1', 'after-2', 'after-3']) expect(await innocent({ id, payload: {} })).toMatchObject({ status: 'processed' });
      expect(await t.countEffects()).toBe(4);
    } finally {
      // Every connection of the pool back to read-write, for the tests after this one.
      await Promise.all([1, 2, 3, 4].map(() => t.db.execute(sql`set session characteristics as transaction read write`)));
    }
  });

  it('a handler that throws a value whose inspection throws (a Proxy with throwing traps, a revoked Proxy, a throwing getter) is counted, not an internal error', async () => {
    const throwingTraps = new Proxy(
      {},
      {
        get() {
          throw new Error('trap get');
        },
        getPrototypeOf() {
          throw new Error('trap getPrototypeOf');
        },
      },
    );
    const revoked = Proxy.revocable({}, {});
    revoked.revoke();
    const throwingCode = Object.defineProperty(new Error('x'), 'code', {
      get() {
        throw new Error('code getter');
      },
    });
    for (const [id, thrown] of [
      ['traps', throwingTraps],
      ['revoked', revoked.proxy],
      ['getter', throwingCode],
    ] as const) {
      const single = withInbox(async () => {
        throw thrown;
      }, options());
      expect(await single({ id, payload: {} })).toMatchObject({ status: 'retry', reason: 'handler-failed' });
      expect(await single({ id, payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
      const batch = withInboxBatch(async () => {
        throw thrown;
      }, options());
      expect(await batch([{ id: `batch-${id}`, payload: {} }])).toMatchObject([{ status: 'retry', reason: 'handler-failed' }]);
    }
    expect((await attempts()).map((row) => [row.message_id, row.attempts])).toEqual([
      ['batch-getter', 1],
      ['batch-revoked', 1],
      ['batch-traps', 1],
      ['getter', 2],
      ['revoked', 2],
      ['traps', 2],
    ]);
  });

  it('stored and exported errors carry the SQLSTATE and constraint but no message content; the full error stays in memory', async () => {
    const secret = 'card-4111-1111-1111-1111';
    await t.query(`create unique index effects_message_once on "${t.schema}".effects (message_id)`);
    await t.query(`insert into "${t.schema}".effects (message_id) values ('taken')`);
    const process = withInbox(
      async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: 'taken', value: { card: (message.payload as { card: string }).card } });
      },
      options({ maxAttempts: 1 }),
    );
    const outcome: InboxOutcome = await process({ id: 'leak', payload: { card: secret } });
    expect(outcome).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
    const exported = [outcome.error!.message, JSON.stringify(deadLetterHeaders(outcome)), JSON.stringify(await attempts())];
    for (const text of exported) {
      expect(text).not.toContain(secret);
      expect(text).not.toMatch(/params:/);
      expect(text).toContain('23505');
      expect(text).toContain('effects_message_once');
    }
    // In memory, on the outcome, the whole chain is still there for the application's own logs.
    let cause: unknown = outcome.error;
    const chain: unknown[] = [];
    while (cause !== undefined && chain.length < 6) {
      cause = (cause as { cause?: unknown }).cause;
      chain.push(cause);
    }
    expect(chain.some((c) => Array.isArray((c as { params?: unknown })?.params))).toBe(true);
  });

  it("a statement sent through tx after the handler returned is refused (TRANSACTION_ENDED), never run inside the next delivery's transaction", async () => {
    let late: Promise<unknown> | undefined;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      if (message.id === 'leaker') {
        setTimeout(() => {
          late = tx.insert(t.effects).values({ messageId: 'leaked' }).execute();
          late!.catch(() => {}); // asserted below
        }, 30);
      } else {
        await new Promise((r) => setTimeout(r, 150)); // the next delivery's transaction is open when the late statement comes
      }
    }, options());
    expect(await process({ id: 'leaker', payload: {} })).toMatchObject({ status: 'processed' });
    expect(await process({ id: 'next', payload: {} })).toMatchObject({ status: 'processed' });
    await expect(late).rejects.toMatchObject({ cause: { code: InboxErrorCodes.TRANSACTION_ENDED } }); // Drizzle wraps it
    expect((await t.query<{ message_id: string }>(`select message_id from "${t.schema}".effects order by 1`)).map((r) => r.message_id)).toEqual([
      'leaker',
      'next',
    ]);
  });

  it('a savepoint started through tx after the handler returned is refused too; nothing of it commits', async () => {
    let late: Promise<unknown> | undefined;
    const process = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      setTimeout(() => {
        late = tx.transaction(async (nested: any) => {
          await nested.insert(t.effects).values({ messageId: 'leaked' });
        });
        late!.catch(() => {}); // asserted below
      }, 30);
    }, options());
    expect(await process({ id: 'leaker', payload: {} })).toMatchObject({ status: 'processed' });
    await new Promise((r) => setTimeout(r, 100));
    const error = await late!.then(
      () => undefined,
      (e: unknown) => e,
    );
    const codes = [error, (error as { cause?: unknown })?.cause].map((e) => (e as { code?: unknown })?.code);
    expect(codes).toContain(InboxErrorCodes.TRANSACTION_ENDED);
    expect((await t.query<{ message_id: string }>(`select message_id from "${t.schema}".effects order by 1`)).map((r) => r.message_id)).toEqual(['leaker']);
  });

  if (driver === 'node-postgres') {
    // postgres-js drops the server's FATAL message when no query is running, so there the killed
    // connection looks like any other lost connection (an outage); node-postgres reports SQLSTATE 25P03.
    it('a handler that holds the transaction idle past idle_in_transaction_session_timeout is counted, not an outage', async () => {
      const process = withInbox(async (message: InboxMessage, tx: any) => {
        await tx.execute(sql`set local idle_in_transaction_session_timeout = 100`);
        await new Promise((r) => setTimeout(r, 400)); // "waiting on an external API" with the transaction open
        await tx.insert(t.effects).values({ messageId: message.id });
      }, options());
      const first = await process({ id: 'idle', payload: {} });
      expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
      expect((await attempts())[0]).toMatchObject({ message_id: 'idle', attempts: 1 });
      expect(await t.countEffects()).toBe(0);
    });
  }

  if (driver === 'node-postgres' || (driver === 'postgres-js' && POSTGRES_JS_MAJOR >= 4)) {
    // postgres-js 3 drops the server's FATAL even with a statement running, so there the ended
    // session looks like any other lost connection (an outage, documented); 4.x reports 25P04.
    it('a handler that outlasts transaction_timeout (PostgreSQL 17+) is counted and ends dead-lettered, not retried for ever as an outage', async () => {
      // PostgreSQL ends the whole session (FATAL 25P04), as a lost connection would end it; a DBA's
      // transaction_timeout and a slow handler made every delivery an uncounted outage retry. Before
      // 17 the setting does not exist: the same statement fails, and is counted just the same.
      const major = (await t.query<{ major: number }>(`select current_setting('server_version_num')::int / 10000 as major`))[0]!.major;
      const process = withInbox(async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        await tx.execute(sql`set local transaction_timeout = 100`);
        await tx.execute(sql`select pg_sleep(1)`);
      }, options());
      const first = await process({ id: 'slow', payload: {} });
      expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
      expect(first.error?.message).toContain(major >= 17 ? '25P04' : '42704');
      expect((await attempts())[0]).toMatchObject({ message_id: 'slow', attempts: 1 });
      expect(await process({ id: 'slow', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
      expect(await t.countEffects()).toBe(0);
    });
  }

  if (driver !== 'pglite') {
    it("a statement_timeout inside the handler is the handler's failure (counted), not an outage", async () => {
      const process = withInbox(async (_message: InboxMessage, tx: any) => {
        await tx.execute(sql`set local statement_timeout = 50`);
        await tx.execute(sql`select pg_sleep(0.5)`);
      }, options());
      const first = await process({ id: 'slow-query', payload: {} });
      expect(first).toMatchObject({ status: 'retry', reason: 'handler-failed', attempt: 1 });
      expect(first.error?.message).toContain('57014');
      expect(await process({ id: 'slow-query', payload: {} })).toMatchObject({ status: 'dead-letter', reason: 'max-attempts-exceeded' });
    });

    it('the inbox connection killed under the handler is an outage: retried, not counted; the redelivery commits once', async () => {
      let kill = true;
      const process = withInbox(async (message: InboxMessage, tx: any) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        if (kill) {
          kill = false;
          // Only this test's connection: its schema name is unique. (Matching any "effects" query
          // killed other tests' transactions running in parallel on the same server.)
          await t.query(
            `select pg_terminate_backend(pid) from pg_stat_activity where pid <> pg_backend_pid() and state = 'idle in transaction' and query like '%"${t.schema}"."effects"%'`,
          );
          await new Promise((r) => setTimeout(r, 50));
          await tx.insert(t.effects).values({ messageId: message.id });
        }
      }, options());
      const first = await process({ id: 'killed', payload: {} });
      expect(first).toMatchObject({ status: 'retry', reason: 'database-unavailable' });
      expect(await attempts()).toEqual([]);
      expect(await process({ id: 'killed', payload: {} })).toMatchObject({ status: 'processed' });
      expect(await t.countEffects('killed')).toBe(1);
    });
  }

  // postgres-js 3 throws an uncaught TypeError when its session ends under a pending write
  // (porsager/postgres#1154, documented); the behaviour is proven on the other two clients.
  if (driver === 'node-postgres' || (driver === 'postgres-js' && POSTGRES_JS_MAJOR >= 4)) {
    it('withInboxBatch: a message whose handler ends its own session is split away from its neighbours, which commit', async () => {
      // A session that breaks under the handler (here the handler's own doing; a query that crashes
      // the backend looks the same) is not counted, as any outage. Unsplit, the batch came back
      // whole every time and its innocent messages never committed.
      const calls: string[][] = [];
      const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
        calls.push(messages.map((m) => m.id));
        await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
        if (messages.some((m) => m.id === 'killer')) await tx.execute(sql`select pg_terminate_backend(pg_backend_pid())`);
      }, options());
      const outcomes = await process(['a', 'killer', 'b', 'c'].map((id) => ({ id, payload: {} })));
      expect(outcomes.map((o) => [o.messageId, o.status, o.reason])).toEqual([
        ['a', 'processed', undefined],
        ['killer', 'retry', 'database-unavailable'],
        ['b', 'processed', undefined],
        ['c', 'processed', undefined],
      ]);
      expect((await t.query<{ message_id: string }>(`select message_id from "${t.schema}".effects order by 1`)).map((r) => r.message_id)).toEqual([
        'a',
        'b',
        'c',
      ]);
      expect(await attempts()).toEqual([]);
      expect(calls[0]).toEqual(['a', 'killer', 'b', 'c']);
      expect(calls).toContainEqual(['killer']);
    });

    it('withInboxBatch: sessions that break whatever runs cost about two transactions per level of the split, not one per message', async () => {
      // A pooler ending long sessions, or a link resetting them, breaks every transaction: splitting
      // each group down to single messages ran 2n - 1 transactions per delivery, every delivery.
      const calls: string[][] = [];
      const process = withInboxBatch(async (messages: InboxMessage[], tx: any) => {
        calls.push(messages.map((m) => m.id));
        await tx.execute(sql`select pg_terminate_backend(pg_backend_pid())`);
      }, options());
      const ids = Array.from({ length: 16 }, (_, i) => `m-${i}`);
      const outcomes = await process(ids.map((id) => ({ id, payload: {} })));
      expect(new Set(outcomes.map((o) => `${o.status}/${o.reason}`))).toEqual(new Set(['retry/database-unavailable']));
      expect(calls.length).toBeLessThanOrEqual(2 * (Math.log2(16) + 1)); // 31 before
      expect(calls.flat().sort()).toEqual(expect.arrayContaining(ids));
      expect(await attempts()).toEqual([]);
      expect(await t.countEffects()).toBe(0);
    });
  }
});
