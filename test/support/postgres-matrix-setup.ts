import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from './embedded-postgres.js';

/**
 * Vitest global setup of the PostgreSQL version matrix (projects `core-pg14` ... `core-pg18`):
 * starts the major the project names in `INBOXED_PG_MAJOR` from its npm-shipped binaries, on a port
 * of its own, and provides its URL as the tests' `databaseUrl`. Stopped when the run ends.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const major = Number(project.config.env?.INBOXED_PG_MAJOR);
  if (!Number.isInteger(major)) throw new Error(`${project.name}: INBOXED_PG_MAJOR is not set`);
  const server = await startEmbeddedPostgres(major);
  project.provide('databaseUrl', server.url);
  return server.stop;
}
