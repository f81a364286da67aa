import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { dockerAvailable } from './docker.js';

const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

async function reachable(url: string): Promise<unknown> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('select 1');
    return undefined;
  } catch (error) {
    return error;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Vitest global setup: finds a real PostgreSQL. `DATABASE_URL` wins when set; otherwise the local
 * server on 127.0.0.1:5432; otherwise, when a Docker engine is present, a testcontainer. With none
 * of these the run fails: integration tests never mock or skip the database.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let stop = async () => {};
  let url = process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL;
  const problem = await reachable(url);
  if (problem !== undefined) {
    if (process.env.DATABASE_URL === undefined && (await dockerAvailable())) {
      const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
      const container = await new PostgreSqlContainer('postgres:16-alpine').start();
      url = container.getConnectionUri();
      stop = async () => void (await container.stop());
    } else {
      throw new Error(
        `PostgreSQL is not reachable at ${url} (${String((problem as Error)?.message ?? problem)}). ` +
          'Start it (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start), set DATABASE_URL, or run Docker for testcontainers.',
      );
    }
  }
  project.provide('databaseUrl', url);
  return stop;
}
