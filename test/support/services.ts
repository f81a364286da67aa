import { inject, type ProvidedContext } from 'vitest';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

/**
 * Reads an endpoint the global setup resolved (env var, local service, or a testcontainer).
 * A missing service is a failure: these tests never skip silently.
 */
export function requireService<K extends keyof ProvidedContext>(key: K): ProvidedContext[K] {
  const value = inject(key);
  if (!value) throw new Error(`${key} was not provided: is the package's vitest globalSetup configured?`);
  return value;
}

/** The PostgreSQL URL for integration tests (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`). */
export function databaseUrl(): string {
  return requireService('databaseUrl');
}
