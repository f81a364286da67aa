import net from 'node:net';
import { PGlite } from '@electric-sql/pglite';
import { createTestDatabase, databaseUrl, postgres, startPostgresProxy, type TestDatabase } from '@inboxed/test-support';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { InboxErrorCodes } from './errors.js';
import { migrate } from './migrations/migrate.js';
import type { InboxMessage } from './types.js';
import { withInbox } from './with-inbox.js';

const CLOSED_PORT_URL = 'postgres://postgres@127.0.0.1:1/test';

/** A TCP server that accepts connections and never answers: a database that hangs. */
async function startSilentServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => void sockets.add(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

describe('database unreachable or timing out', () => {
  const handler = vi.fn(async () => {});
  beforeEach(() => {
    handler.mockClear();
  });

  async function expectRetry(db: unknown) {
    const process = withInbox(handler, { db: db as never, consumer: 'c', backoff: { baseDelayMs: 100 } });
    const outcome = await process({ id: 'm-1', payload: { a: 1 } });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'database-unavailable', messageId: 'm-1' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.DATABASE_UNAVAILABLE);
    expect(outcome.retryAfterMs).toBeGreaterThanOrEqual(0);
    expect(handler).not.toHaveBeenCalled();
  }

  it('node-postgres: connection refused -> retry', async () => {
    const pool = new pg.Pool({ connectionString: CLOSED_PORT_URL });
    await expectRetry(drizzleNodePg(pool));
    await pool.end();
  });

  it('postgres-js: connection refused -> retry', async () => {
    const client = postgres(CLOSED_PORT_URL, { max: 1, connect_timeout: 2 });
    await expectRetry(drizzlePostgresJs(client));
    await client.end({ timeout: 1 });
  });

  it('node-postgres: a server that never answers -> retry after the connect timeout', async () => {
    const silent = await startSilentServer();
    const pool = new pg.Pool({ connectionString: `postgres://postgres@127.0.0.1:${silent.port}/test`, connectionTimeoutMillis: 300 });
    await expectRetry(drizzleNodePg(pool));
    await pool.end();
    await silent.close();
  });

  it('postgres-js: a server that never answers -> retry after the connect timeout', async () => {
    const silent = await startSilentServer();
    const client = postgres(`postgres://postgres@127.0.0.1:${silent.port}/test`, { max: 1, connect_timeout: 1 });
    await expectRetry(drizzlePostgresJs(client));
    await client.end({ timeout: 1 });
    await silent.close();
  });

  it('pglite: a closed database -> retry', async () => {
    const client = new PGlite();
    await client.close();
    await expectRetry(drizzlePglite(client));
  });
});

describe('database lost mid-stream (connection cut by a proxy)', () => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres');
    await migrate(t.db, { schema: t.schema });
  });
  afterEach(async () => {
    await t.close();
  });

  it('messages during the outage are retried, never processed; after it each commits exactly once', async () => {
    const { proxy, url } = await startPostgresProxy(databaseUrl());
    const pool = new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: 1000 });
    pool.on('error', () => {}); // idle clients die with the proxy; the next checkout reconnects
    const db = drizzleNodePg(pool);
    let cutInsideTransaction = false;
    const process = withInbox(
      async (message: InboxMessage, tx) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        if (message.id === 'cut-here' && !cutInsideTransaction) {
          cutInsideTransaction = true;
          proxy.cut(); // the commit can no longer reach the server
        }
      },
      { db, consumer: 'c', tables: { schema: t.schema } },
    );

    const ids = Array.from({ length: 20 }, (_, i) => `m-${i}`);
    for (const id of ids.slice(0, 5)) expect((await process({ id, payload: {} })).status).toBe('processed');

    // Lost between the handler's write and the commit: not processed, nothing persisted.
    const lost = await process({ id: 'cut-here', payload: {} });
    expect(lost).toMatchObject({ status: 'retry', reason: 'database-unavailable' });
    for (const id of ids.slice(5, 10)) expect((await process({ id, payload: {} })).status).toBe('retry');

    proxy.restore();
    // The broker redelivers everything not acked: the retried ones, plus a replay of the first five.
    const redelivered = [...ids, 'cut-here'].map((id) => ({ id, payload: {} }));
    let outcomes = await Promise.all(redelivered.map((m) => process(m)));
    // 21 deliveries share 4 connections with a 1 s checkout timeout: on a loaded machine some wait
    // longer and come back `retry` (database-unavailable, not counted); the broker redelivers them.
    for (let round = 0; round < 5 && outcomes.some((o) => o.status === 'retry'); round++) {
      expect(outcomes.filter((o) => o.status === 'retry').map((o) => o.reason)).toEqual(
        outcomes.filter((o) => o.status === 'retry').map(() => 'database-unavailable'),
      );
      const retried = await Promise.all(outcomes.filter((o) => o.status === 'retry').map((o) => process({ id: o.messageId, payload: {} })));
      outcomes = [...outcomes.filter((o) => o.status !== 'retry'), ...retried];
    }
    expect(
      outcomes
        .filter((o) => o.status === 'duplicate')
        .map((o) => o.messageId)
        .sort(),
    ).toEqual(ids.slice(0, 5).sort());
    expect(outcomes.filter((o) => o.status === 'processed')).toHaveLength(16);
    expect(await t.countEffects()).toBe(21);
    for (const id of [...ids, 'cut-here']) expect(await t.countEffects(id)).toBe(1);
    await pool.end();
    await proxy.close();
  });
});

describe('concurrent copy held longer than lockTimeoutMs', () => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres');
    await migrate(t.db, { schema: t.schema });
  });
  afterEach(async () => {
    await t.close();
  });

  it('the waiting copy gives up with retry (in-progress), never duplicate; its redelivery is then a duplicate', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inHandler = new Promise<void>((resolve) => (entered = resolve));
    const process = withInbox(
      async (message: InboxMessage, tx) => {
        await tx.insert(t.effects).values({ messageId: message.id });
        entered();
        await held;
      },
      { db: t.db, consumer: 'c', tables: { schema: t.schema }, lockTimeoutMs: 200 },
    );

    const first = process({ id: 'slow', payload: {} });
    await inHandler;
    const second = await process({ id: 'slow', payload: {} });
    expect(second).toMatchObject({ status: 'retry', reason: 'in-progress' });
    expect(second.error?.code).toBe(InboxErrorCodes.LOCK_TIMEOUT);
    release();
    expect((await first).status).toBe('processed');
    expect((await process({ id: 'slow', payload: {} })).status).toBe('duplicate');
    expect(await t.countEffects()).toBe(1);
    const attempts = await t.query(`select * from "${t.schema}".inbox_attempts`);
    expect(attempts).toEqual([]); // waiting on a copy is not the message's failure
  });
});

describe('inbox tables not migrated', () => {
  it('is a retry with a clear code, never processed and never dead-lettered', async () => {
    const db = drizzlePglite(new PGlite());
    const handler = vi.fn(async () => {});
    const single = withInbox(handler, { db, consumer: 'c' });
    const outcome = await single({ id: 'm-1', payload: {} });
    expect(outcome).toMatchObject({ status: 'retry', reason: 'inbox-table-missing' });
    expect(outcome.error?.code).toBe(InboxErrorCodes.INBOX_TABLE_MISSING);
    expect(outcome.error?.message).toMatch(/migrate\(/);
    expect(handler).not.toHaveBeenCalled();
  });
});

describe('a connection that dies while BEGIN is in flight', () => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres');
    await migrate(t.db, { schema: t.schema });
  });
  afterEach(async () => {
    await t.close();
  });

  it('returns its client to the pool, so a pool of one keeps working afterwards', async () => {
    // Regression: Drizzle's pool transaction sends BEGIN outside its try/finally, so a BEGIN that
    // fails leaks the client; with max: 1 every later message would then wait forever.
    const { proxy, url } = await startPostgresProxy(databaseUrl());
    const pool = new pg.Pool({ connectionString: url, max: 1, connectionTimeoutMillis: 2000 });
    pool.on('error', () => {});
    const process = withInbox(
      async (message: InboxMessage, tx) => {
        await tx.insert(t.effects).values({ messageId: message.id });
      },
      { db: drizzleNodePg(pool), consumer: 'c', tables: { schema: t.schema } },
    );

    expect((await process({ id: 'before', payload: {} })).status).toBe('processed');
    proxy.freeze(); // the next BEGIN leaves, and no answer comes back
    const stuck = process({ id: 'during', payload: {} });
    await new Promise((r) => setTimeout(r, 200));
    proxy.cut(); // ...then the connection dies under it
    expect(await stuck).toMatchObject({ status: 'retry', reason: 'database-unavailable' });

    proxy.restore();
    const after = await Promise.race([
      process({ id: 'during', payload: {} }),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('pool wedged: the client leaked')), 10_000)),
    ]);
    expect(after.status).toBe('processed');
    expect(await t.countEffects()).toBe(2);
    await pool.end();
    await proxy.close();
  });
});
