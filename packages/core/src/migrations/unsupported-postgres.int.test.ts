import { type EmbeddedPostgres, startEmbeddedPostgres } from '@inboxed/test-support/embedded-postgres';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InboxErrorCodes } from '../errors.js';
import { withInbox } from '../with-inbox.js';
import { migrate } from './migrate.js';

// The oldest major inboxed refuses, started from the same npm-shipped binaries as the matrix.
describe('PostgreSQL 13, older than supported', () => {
  let server: EmbeddedPostgres;
  let pool: pg.Pool;
  beforeAll(async () => {
    server = await startEmbeddedPostgres(13);
    pool = new pg.Pool({ connectionString: server.url });
    pool.on('error', () => {}); // idle clients see the server's shutdown at the end
  });
  afterAll(async () => {
    await pool?.end();
    await server?.stop();
  });

  it('migrate() and checkTables() (every consumer start) fail with UNSUPPORTED_DATABASE naming both versions', async () => {
    const unsupported = expect.objectContaining({
      code: InboxErrorCodes.UNSUPPORTED_DATABASE,
      message: expect.stringMatching(/PostgreSQL 13\.\d+ is not supported: inboxed needs PostgreSQL 14 or later/),
    });
    const db = drizzle(pool);
    await expect(migrate(db)).rejects.toThrowError(unsupported);
    await expect(withInbox(async () => {}, { db, consumer: 'c' }).checkTables()).rejects.toThrowError(unsupported);
    const { rows } = await pool.query(`select count(*)::int as n from pg_tables where tablename like 'inbox%'`);
    expect(rows).toEqual([{ n: 0 }]); // refused before creating anything
  });
});
