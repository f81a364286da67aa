import { createTestDatabase, type Driver, type TestDatabase } from '@inboxed/test-support';
import { afterEach, beforeEach } from 'vitest';
import { migrate } from '../migrations/migrate.js';

/** A test's database: a fresh schema on `driver` with the inbox migrated into it. */
export interface MigratedDatabase {
  /** The current test's database (valid inside a test). */
  readonly t: TestDatabase;
  /** Options for withInbox/withInboxBatch on it: consumer `c`, the test's schema, 1 ms backoff. */
  options(
    extra?: Record<string, unknown>,
  ): { db: any; consumer: string; tables: { schema: string }; backoff: { baseDelayMs: number } } & Record<string, unknown>;
}

/**
 * Registers beforeEach/afterEach for a `describe`: every test gets its own schema on `driver`,
 * migrated, dropped afterwards.
 */
export function useMigratedDatabase(driver: Driver, settings: { poolSize?: number } = {}): MigratedDatabase {
  let current: TestDatabase | undefined;
  beforeEach(async () => {
    current = await createTestDatabase(driver, settings);
    // INBOXED_PARTITIONS runs a suite on a hash-partitioned inbox (the core-partitioned project).
    const partitions = process.env.INBOXED_PARTITIONS === undefined ? undefined : Number(process.env.INBOXED_PARTITIONS);
    await migrate(current.db, { schema: current.schema }, { partitions });
  });
  afterEach(async () => {
    await current?.close();
    current = undefined;
  });
  const database: MigratedDatabase = {
    get t() {
      if (current === undefined) throw new Error('the test database exists only inside a test');
      return current;
    },
    options: (extra = {}) => ({ db: database.t.db, consumer: 'c', tables: { schema: database.t.schema }, backoff: { baseDelayMs: 1 }, ...extra }),
  };
  return database;
}
