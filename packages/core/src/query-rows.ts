import type { SQL } from 'drizzle-orm';
import type { AnyPgDatabase } from './types.js';

/** @internal Rows of a raw query's result on any driver: node-postgres and PGlite return `{ rows }`, postgres-js an array. */
export function rowsIn<T>(result: unknown): T[] {
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[];
}

/** @internal Runs a raw query and returns its rows, whatever the driver (see {@link rowsIn}). */
export async function rowsOf<T>(db: Pick<AnyPgDatabase, 'execute'>, query: SQL): Promise<T[]> {
  return rowsIn<T>(await db.execute(query));
}
