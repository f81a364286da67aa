import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { InboxErrorCodes } from './errors.js';
import { purgeInbox } from './retention.js';
import { withInbox } from './with-inbox.js';

describe.each(DRIVERS)('purgeInbox on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  it('deletes only rows older than the window, in batches, for the chosen consumer', async () => {
    const tables = { schema: t.schema };
    const a = withInbox(async () => {}, { db: t.db, consumer: 'a', tables });
    const b = withInbox(async () => {}, { db: t.db, consumer: 'b', tables });
    for (let i = 0; i < 25; i++) await a({ id: `old-${i}`, payload: i });
    await b({ id: 'old-b', payload: 0 });
    await t.query(`update "${t.schema}".inbox set completed_at = now() - interval '2 days'`);
    await a({ id: 'fresh', payload: 1 });

    expect(await purgeInbox(t.db, { olderThanMs: 86_400_000, consumer: 'a', batchSize: 10, tables })).toEqual({ deleted: 25, attemptsDeleted: 0 });
    const left = await t.query<{ consumer: string; message_id: string }>(`select consumer, message_id from "${t.schema}".inbox order by 1, 2`);
    expect(left).toEqual([
      { consumer: 'a', message_id: 'fresh' },
      { consumer: 'b', message_id: 'old-b' },
    ]);
    // A purged id is new again: the retention window must outlast every redelivery.
    expect((await a({ id: 'old-3', payload: 3 })).status).toBe('processed');
  });

  it('never deletes a leased claim whose lease is live, however old its last change', async () => {
    const tables = { schema: t.schema };
    await t.query(`insert into "${t.schema}".inbox (consumer, message_id, status, lease_expires_at, completed_at) values
      ('a', 'live', 'processing', now() + interval '1 minute', now() - interval '2 days'),
      ('a', 'expired', 'processing', now() - interval '1 minute', now() - interval '2 days'),
      ('a', 'done', 'processed', null, now() - interval '2 days')`);
    expect(await purgeInbox(t.db, { olderThanMs: 86_400_000, tables })).toEqual({ deleted: 2, attemptsDeleted: 0 });
    expect(await t.query(`select message_id from "${t.schema}".inbox`)).toEqual([{ message_id: 'live' }]);
  });

  it('deletes stale attempts records in bounded batches too, leaving recent ones', async () => {
    const tables = { schema: t.schema };
    await t.query(`insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts, last_attempt_at)
      select 'c', 'stale-' || g, 1, now() - interval '2 days' from generate_series(1, 25) g`);
    await t.query(`insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts) values ('c', 'recent', 2)`);
    expect(await purgeInbox(t.db, { olderThanMs: 86_400_000, batchSize: 10, maxBatches: 2, tables })).toEqual({ deleted: 0, attemptsDeleted: 20 });
    expect(await purgeInbox(t.db, { olderThanMs: 86_400_000, batchSize: 10, tables })).toEqual({ deleted: 0, attemptsDeleted: 5 });
    expect(await t.query(`select message_id from "${t.schema}".inbox_attempts`)).toEqual([{ message_id: 'recent' }]);
  });

  it('rejects a non-positive window', async () => {
    await expect(purgeInbox(t.db, { olderThanMs: 0 })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_OPTIONS });
  });
});
