import { databaseUrl } from '@inboxed/test-support';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { expect, it } from 'vitest';
import { migrate } from './migrate.js';
import { migrations } from './migrations.js';
import { MIN_POSTGRES_MAJOR } from './server-version.js';

// In the version matrix (projects core-pg14 ... core-pg18) this proves each project really runs on
// its own major; in the default run, that the machine's PostgreSQL is a supported one.
it('runs on the PostgreSQL major under test, which migrate() accepts', async () => {
  const pool = new pg.Pool({ connectionString: databaseUrl() });
  try {
    const { rows } = await pool.query<{ num: string }>(`select current_setting('server_version_num') as num`);
    const major = Math.floor(Number(rows[0]!.num) / 10_000);
    if (process.env.INBOXED_PG_MAJOR !== undefined) expect(major).toBe(Number(process.env.INBOXED_PG_MAJOR));
    expect(major).toBeGreaterThanOrEqual(MIN_POSTGRES_MAJOR);
    const schema = `version_${major}_${process.pid}_${Date.now()}`;
    await expect(migrate(drizzle(pool), { schema })).resolves.toMatchObject({ version: migrations.length });
    await pool.query(`drop schema "${schema}" cascade`);
  } finally {
    await pool.end();
  }
});
