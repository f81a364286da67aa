// Retention's edge cases, on node-postgres only: nothing here depends on the server's version, so
// they stay out of the per-PostgreSQL-major runs (vitest.config.ts) that repeat retention.int.test.ts.
import { describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { previewPurge } from './admin/index.js';
import { InboxErrorCodes } from './errors.js';
import { purgeInbox } from './retention.js';
import { startInboxRetention } from './retention-scheduler.js';
import { withInbox } from './with-inbox.js';

describe('retention edges (node-postgres)', () => {
  const database = useMigratedDatabase('node-postgres');
  const DAY = 86_400_000;

  it('purges leased claims that were given back (no lease) once they are older than the window, and keeps a live lease', async () => {
    const { t } = database;
    const tables = { schema: t.schema };
    const failing = withInbox(
      async () => {
        throw new Error('provider down');
      },
      { ...database.options(), mode: 'leased' as const, maxAttempts: 2 },
    );
    expect((await failing({ id: 'given-back', payload: 1 })).status).toBe('retry');
    await failing({ id: 'dead', payload: 1 });
    expect((await failing({ id: 'dead', payload: 1 })).status).toBe('dead-letter');
    await t.query(
      `insert into "${t.schema}".inbox (consumer, message_id, status, lease_expires_at) values ('c', 'live', 'processing', now() + interval '1 hour')`,
    );
    const leases = await t.query<{ message_id: string; lease: boolean }>(
      `select message_id, lease_expires_at is not null as lease from "${t.schema}".inbox order by 1`,
    );
    expect(leases).toEqual([
      { message_id: 'dead', lease: false },
      { message_id: 'given-back', lease: false },
      { message_id: 'live', lease: true },
    ]);
    await t.query(`update "${t.schema}".inbox set completed_at = now() - interval '30 days'`);

    expect((await previewPurge(t.db, tables, { olderThanMs: DAY })).inbox).toBe(2);
    expect((await purgeInbox(t.db, { olderThanMs: DAY, tables })).deleted).toBe(2);
    expect(await t.query(`select message_id from "${t.schema}".inbox`)).toEqual([{ message_id: 'live' }]);
  });

  it.each([1e-7, 0.5, 1e300, 8.64e15, Number.MAX_SAFE_INTEGER, Number.NaN])(
    'refuses the window %s as INVALID_OPTIONS before touching the database',
    async (olderThanMs) => {
      const tables = { schema: database.t.schema };
      await expect(purgeInbox(database.t.db, { olderThanMs, tables })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_OPTIONS });
      await expect(previewPurge(database.t.db, tables, { olderThanMs })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_OPTIONS });
      expect(() => startInboxRetention(database.t.db, { olderThanMs, everyMs: DAY, tables })).toThrow(/olderThanMs must be/);
    },
  );

  it('accepts the longest window (100 years) and a fractional one, and reports database failures as InboxErrors', async () => {
    const tables = { schema: database.t.schema };
    expect(await purgeInbox(database.t.db, { olderThanMs: 3_155_760_000_000, tables })).toEqual({ deleted: 0, attemptsDeleted: 0 });
    expect(await purgeInbox(database.t.db, { olderThanMs: 1.5, tables })).toEqual({ deleted: 0, attemptsDeleted: 0 });
    await expect(purgeInbox(database.t.db, { olderThanMs: DAY, tables: { schema: 'no_such_schema_here' } })).rejects.toMatchObject({
      code: InboxErrorCodes.INBOX_TABLE_MISSING,
    });
  });

  it('refuses a schedule longer than the longest timer Node keeps (it would purge back to back)', () => {
    expect(() => startInboxRetention(database.t.db, { olderThanMs: DAY, everyMs: 30 * DAY, tables: { schema: database.t.schema } })).toThrow(
      /everyMs must be at most 2147483647 ms/,
    );
  });

  it('a redelivery whose row retention deletes between claim and read is processed again, never an inbox query failure', async () => {
    const { t } = database;
    const tables = { schema: t.schema };
    const process = withInbox(async () => {}, database.options());
    const outcomes: string[] = [];
    for (let round = 0; round < 10; round++) {
      const ids = Array.from({ length: 20 }, (_, i) => `r${round}-${i}`);
      for (const id of ids) await process({ id, payload: 1 });
      await t.query(`update "${t.schema}".inbox set completed_at = now() - interval '2 days'`);
      const results = await Promise.all([...ids.map((id) => process({ id, payload: 1 })), purgeInbox(t.db, { olderThanMs: DAY, tables, batchSize: 3 })]);
      for (const result of results.slice(0, ids.length)) outcomes.push((result as { status: string }).status);
    }
    expect(outcomes.filter((status) => status !== 'processed' && status !== 'duplicate')).toEqual([]);
    expect(await t.query(`select count(*)::int as n from "${t.schema}".inbox_attempts`)).toEqual([{ n: 0 }]);
  });
});
