import { createTestDatabase, type TestDatabase } from '@inboxed/test-support';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import { startInboxRetention, type InboxRetention, type RetentionRun } from './retention-scheduler.js';
import { databaseUrl } from '@inboxed/test-support';

const DAY = 86_400_000;

/** `count` completed rows two days old for consumer `c`, ids `old-0..`, in one statement. */
async function seedOld(t: TestDatabase, count: number, consumer = 'c'): Promise<void> {
  await t.query(`insert into "${t.schema}".inbox (consumer, message_id, status, completed_at)
    select '${consumer}', 'old-' || g, 'processed', now() - interval '2 days' - g * interval '1 ms' from generate_series(1, ${count}) g`);
}

const count = async (t: TestDatabase, table = 'inbox') => Number((await t.query<{ n: number }>(`select count(*)::int as n from "${t.schema}".${table}`))[0]?.n);

describe('startInboxRetention on node-postgres', () => {
  const database = useMigratedDatabase('node-postgres', { poolSize: 12 });
  let t: TestDatabase;
  const schedules: InboxRetention[] = [];
  const schedule = (options: Partial<Parameters<typeof startInboxRetention>[1]> = {}) => {
    // A long interval: the tests drive runs with runNow(), the timer never fires during a test.
    const s = startInboxRetention(t.db, { olderThanMs: DAY, everyMs: 3_600_000, tables: { schema: t.schema }, ...options });
    schedules.push(s);
    return s;
  };
  beforeEach(() => {
    t = database.t;
  });
  afterEach(async () => {
    for (const s of schedules.splice(0)) await s.stop();
  });

  it('purges 200,000 old rows in bounded batches while inserts go on, none of them ever waiting on a lock', async () => {
    await seedOld(t, 200_000);
    await t.query(`insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts, last_attempt_at)
      select 'c', 'failing-' || g, 1, now() - interval '2 days' from generate_series(1, 2500) g`);
    await t.query(`analyze "${t.schema}".inbox`);

    // Writers: new ids keep arriving while the purge runs (what consumers do), each its own transaction.
    const writer = new pg.Pool({ connectionString: databaseUrl(), max: 4 });
    const observer = new pg.Client({ connectionString: databaseUrl() });
    await observer.connect();
    let running = true;
    let inserted = 0;
    let lockWaitsSeen = 0;
    let samples = 0;
    const writers = Array.from({ length: 3 }, async (_, w) => {
      while (running) {
        await writer.query(`insert into "${t.schema}".inbox (consumer, message_id, status) values ('c', $1, 'processed')`, [`new-${w}-${inserted++}`]);
      }
    });
    // Anyone waiting on a row, transaction or table lock (a writer behind a delete, or a delete behind
    // a writer) shows up here. Writers extending the table wait on each other's extension lock
    // ('extend') now and then, purge or not; that one is not the purge's doing and is not counted.
    const watching = (async () => {
      while (running) {
        const { rows } = await observer.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
           where wait_event_type = 'Lock' and wait_event <> 'extend' and query like '%"${t.schema}".inbox%'`,
        );
        lockWaitsSeen += Number(rows[0]?.n ?? 0);
        samples++;
      }
    })();

    const batchSize = 5_000;
    const run = await schedule({ batchSize }).runNow();
    running = false;
    await Promise.all([...writers, watching]);
    await writer.end();
    await observer.end();

    expect(run).toMatchObject({ ran: true, stoodDown: false, deleted: 200_000, attemptsDeleted: 2_500 });
    // 40 full inbox batches + the empty one that ends it, one short batch for the attempts: every statement bounded.
    expect(run.batches).toBe(200_000 / batchSize + 1 + 1);
    expect(samples).toBeGreaterThan(10);
    expect(lockWaitsSeen).toBe(0);
    expect(inserted).toBeGreaterThan(0);
    // Every new row is still there; every old one is gone. The report's age is the oldest row left.
    expect(await count(t)).toBe(inserted);
    expect(run.oldestAgeMs).not.toBeNull();
    expect(run.oldestAgeMs!).toBeLessThan(DAY);
    expect(await count(t, 'inbox_attempts')).toBe(0);
  }, 120_000);

  it('two schedulers: only one cleans at a time; the other stands aside, and between them everything old goes once', async () => {
    await seedOld(t, 20_000);
    const activeDeletes: number[] = [];
    const observer = new pg.Client({ connectionString: databaseUrl() });
    await observer.connect();
    let running = true;
    const watching = (async () => {
      while (running) {
        const { rows } = await observer.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where state = 'active' and query like '/* inboxed:retention */%"${t.schema}"%'`,
        );
        activeDeletes.push(Number(rows[0]?.n ?? 0));
      }
    })();
    const a = schedule({ batchSize: 200 });
    const b = schedule({ batchSize: 200 });
    const runs: RetentionRun[] = await Promise.all([a.runNow(), b.runNow(), a.runNow(), b.runNow()]);
    running = false;
    await watching;
    await observer.end();

    expect(runs.reduce((sum, r) => sum + r.deleted, 0)).toBe(20_000);
    expect(await count(t)).toBe(0);
    expect(Math.max(...activeDeletes)).toBeLessThanOrEqual(1);
    expect(activeDeletes.some((n) => n === 1)).toBe(true);
  }, 60_000);

  it('a run that finds another instance holding the lock does nothing; once it is free, the next run cleans', async () => {
    await seedOld(t, 50);
    const holder = new pg.Client({ connectionString: databaseUrl() });
    await holder.connect();
    await holder.query('begin');
    await holder.query(`select pg_advisory_xact_lock(hashtext('inboxed:retention:"${t.schema}"."inbox"'))`);
    const reports: RetentionRun[] = [];
    const s = schedule({ onRun: (run) => reports.push(run) });
    expect(await s.runNow()).toMatchObject({ ran: false, deleted: 0, batches: 0 });
    expect(await count(t)).toBe(50);
    await holder.query('commit');
    await holder.end();
    expect(await s.runNow()).toMatchObject({ ran: true, deleted: 50 });
    expect(reports.map((r) => r.ran)).toEqual([false, true]);
    expect(s.lastRun).toMatchObject({ ran: true, deleted: 50, oldestAgeMs: null });
  });

  it('runs by itself every everyMs, never deletes a live lease, and stop() ends the schedule', async () => {
    await seedOld(t, 30);
    await t.query(`insert into "${t.schema}".inbox (consumer, message_id, status, lease_expires_at, completed_at)
      values ('c', 'live', 'processing', now() + interval '1 minute', now() - interval '2 days')`);
    const reports: RetentionRun[] = [];
    const s = schedule({ everyMs: 150, jitter: 0.5, onRun: (run) => reports.push(run) });
    await expect.poll(() => reports.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(3);
    await s.stop();
    const after = reports.length;
    await new Promise((r) => setTimeout(r, 500));
    expect(reports.length).toBe(after);
    expect(reports.reduce((sum, r) => sum + r.deleted, 0)).toBe(30);
    expect(await t.query(`select message_id from "${t.schema}".inbox`)).toEqual([{ message_id: 'live' }]);
  });

  it('a failed run is reported with a code and the schedule goes on; a statement over statementTimeoutMs is cut off', async () => {
    await seedOld(t, 10);
    const errors: string[] = [];
    const s = schedule({ statementTimeoutMs: 1, everyMs: 100, jitter: 0, onError: (error) => errors.push(String(error.code)) });
    // Make each delete slow enough to hit the 1 ms statement timeout.
    await t.query(`create or replace function "${t.schema}".slow() returns trigger language plpgsql as $$ begin perform pg_sleep(0.05); return old; end $$`);
    await t.query(`create trigger slow before delete on "${t.schema}".inbox for each row execute function "${t.schema}".slow()`);
    await expect(s.runNow()).rejects.toMatchObject({ code: InboxErrorCodes.RETENTION_FAILED });
    await expect.poll(() => errors.length, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
    expect(new Set(errors)).toEqual(new Set([InboxErrorCodes.RETENTION_FAILED]));
    await t.query(`drop trigger slow on "${t.schema}".inbox`);
    await expect.poll(async () => count(t), { timeout: 5_000 }).toBe(0);
  });

  it('refuses invalid options with INVALID_OPTIONS', () => {
    for (const options of [{ everyMs: 0 }, { everyMs: Number.NaN }, { jitter: 2 }, { statementTimeoutMs: 0 }, { olderThanMs: -1 }, { batchSize: 0 }]) {
      expect(() => startInboxRetention(t.db, { olderThanMs: DAY, everyMs: 1000, ...options })).toThrow(
        expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS }),
      );
    }
  });
});

describe('startInboxRetention on PGlite', () => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase('pglite');
    const { migrate } = await import('./migrations/migrate.js');
    await migrate(t.db, { schema: t.schema });
  });
  afterEach(async () => t.close());

  it('purges in batches and reports the oldest row left', async () => {
    await seedOld(t, 120);
    await t.query(`insert into "${t.schema}".inbox (consumer, message_id, status) values ('c', 'fresh', 'processed')`);
    const s = startInboxRetention(t.db, { olderThanMs: DAY, everyMs: 3_600_000, batchSize: 50, tables: { schema: t.schema } });
    const run = await s.runNow();
    await s.stop();
    expect(run).toMatchObject({ ran: true, deleted: 120, batches: 3 + 1 });
    expect(run.oldestAgeMs).toBeLessThan(60_000);
  });
});
