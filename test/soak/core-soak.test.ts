import { migrate, withInbox, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import { createTestDatabase, databaseUrl, startPostgresProxy, type TestDatabase } from '@inboxed/test-support';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

/**
 * Soak: four consumer instances (separate pools) drain a shared redelivery-heavy stream while the
 * database connection is cut for a second mid-run. Bounded in size and time; asserts that every
 * unique message ends with exactly one effect and that nothing was lost. (This test caught Drizzle's
 * node-postgres pool transaction leaking the client when BEGIN fails; see transaction.ts.)
 */
describe('soak: 4 consumers, redelivery storm, database outage', () => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: 'soak' });
    await migrate(t.db, { schema: t.schema });
  });
  afterEach(async () => {
    await t.close();
  });

  it('every unique message is applied exactly once', async () => {
    const { proxy, url } = await startPostgresProxy(databaseUrl());
    const pools = Array.from({ length: 4 }, () => {
      const pool = new pg.Pool({ connectionString: url, max: 3, connectionTimeoutMillis: 500 });
      pool.on('error', () => {});
      return pool;
    });
    const flakyFailures = new Set<string>();
    const consumers = pools.map((pool) =>
      withInbox(
        async (message: InboxMessage, tx) => {
          // 3% of messages fail once, as a flaky dependency would.
          if (Number(message.id.slice(2)) % 33 === 0 && !flakyFailures.has(message.id)) {
            flakyFailures.add(message.id);
            throw new Error('flaky');
          }
          await tx.insert(t.effects).values({ messageId: message.id });
        },
        { db: drizzle(pool), consumer: 'soak', tables: { schema: t.schema }, backoff: { baseDelayMs: 5 } },
      ),
    );

    const UNIQUE = 1_500;
    const queue: InboxMessage[] = [];
    for (let i = 0; i < UNIQUE; i++) for (let c = 0; c < 1 + (i % 3); c++) queue.push({ id: `s-${i}`, payload: { i } });
    for (let i = queue.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [queue[i], queue[j]] = [queue[j]!, queue[i]!];
    }
    const tally: Record<string, number> = {};
    const outage = setTimeout(() => {
      proxy.cut();
      setTimeout(() => proxy.restore(), 1000);
    }, 300);
    const deadline = Date.now() + 60_000;
    await Promise.all(
      consumers.flatMap((consume) =>
        [0, 1, 2].map(async () => {
          for (let m = queue.shift(); m !== undefined; m = queue.shift()) {
            if (Date.now() > deadline) throw new Error('soak did not drain in time');
            const outcome: InboxOutcome = await consume(m);
            tally[outcome.status] = (tally[outcome.status] ?? 0) + 1;
            if (outcome.status === 'retry') {
              queue.push(m); // the broker redelivers what was not acked
              await new Promise((r) => setTimeout(r, 5));
            } else {
              expect(['processed', 'duplicate']).toContain(outcome.status);
            }
          }
        }),
      ),
    );
    clearTimeout(outage);

    // A commit whose acknowledgement is lost with the connection reports `retry`; its redelivery
    // is then a `duplicate`. So `processed` may fall short of UNIQUE, but effects never differ.
    expect(tally.processed).toBeLessThanOrEqual(UNIQUE);
    expect(await t.countEffects()).toBe(UNIQUE);
    const perId = await t.query<{ n: number }>(`select count(*)::int as n from "${t.schema}".effects group by message_id having count(*) > 1`);
    expect(perId).toEqual([]);
    expect(tally.retry ?? 0).toBeGreaterThan(0); // the outage and the flaky handler really happened
    await Promise.all(pools.map((p) => p.end()));
    await proxy.close();
  });
});
