import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { TestProject } from 'vitest/node';
import { dockerAvailable } from './docker.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The SQS API endpoint for integration tests (real AWS-compatible HTTP endpoint). */
    sqsEndpoint: string;
  }
}

/**
 * Imports a package installed in the *project's* node_modules (packages/sqs), not test/support's:
 * the SQS emulator and LocalStack module are dependencies of the adapter package only. Both are
 * ESM-only (no `require` export), so we read the export map instead of `createRequire().resolve`.
 */
async function importFromProject<T>(root: string, name: string): Promise<T> {
  for (let dir = root; ; dir = dirname(dir)) {
    const manifest = join(dir, 'node_modules', name, 'package.json');
    if (existsSync(manifest)) {
      const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as {
        main?: string;
        exports?: Record<string, { import?: { default?: string } | string; default?: string }>;
      };
      const dot = pkg.exports?.['.'];
      const entry = (typeof dot?.import === 'string' ? dot.import : dot?.import?.default) ?? dot?.default ?? pkg.main ?? 'index.js';
      return (await import(pathToFileURL(join(dirname(manifest), entry)).href)) as T;
    }
    if (dirname(dir) === dir) throw new Error(`${name} is not installed under ${root}`);
  }
}

// The shapes we use of the two packages, typed here because test/support does not depend on them.
interface FauxqsModule {
  startFauxqs(options: { port: number; logger: boolean }): Promise<{ address: string; stop(): Promise<void> }>;
}
interface LocalstackModule {
  LocalstackContainer: new (image: string) => { start(): Promise<{ getConnectionUri(): string; stop(): Promise<unknown> }> };
}

async function reachable(endpoint: string): Promise<boolean> {
  try {
    // Any HTTP answer means an SQS API listens there; only a network error means it does not.
    await fetch(endpoint, { signal: AbortSignal.timeout(3000) });
    return true;
  } catch {
    return false;
  }
}

/**
 * Vitest global setup: finds a real SQS API. `SQS_ENDPOINT` wins when set (it must answer);
 * otherwise the `fauxqs` emulator is started in-process on a free port (it needs no Docker);
 * if fauxqs cannot be loaded and a Docker engine is present, a LocalStack testcontainer. With none
 * of these the run fails: SQS tests never mock or skip the broker.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fromEnv = process.env.SQS_ENDPOINT;
  if (fromEnv !== undefined && fromEnv !== '') {
    if (!(await reachable(fromEnv))) throw new Error(`SQS_ENDPOINT=${fromEnv} is not reachable`);
    project.provide('sqsEndpoint', fromEnv);
    return async () => {};
  }
  // The emulator is a dependency of packages/sqs; other projects (the packed-package tests) borrow it.
  const root = existsSync(join(project.config.root, 'node_modules', 'fauxqs'))
    ? project.config.root
    : fileURLToPath(new URL('../../packages/sqs', import.meta.url));
  let emulatorProblem: unknown;
  try {
    const { startFauxqs } = await importFromProject<FauxqsModule>(root, 'fauxqs');
    const server = await startFauxqs({ port: 0, logger: false });
    project.provide('sqsEndpoint', server.address);
    return async () => void (await server.stop());
  } catch (error) {
    emulatorProblem = error;
  }
  if (await dockerAvailable()) {
    const { LocalstackContainer } = await importFromProject<LocalstackModule>(root, '@testcontainers/localstack');
    const container = await new LocalstackContainer('localstack/localstack:3').start();
    project.provide('sqsEndpoint', container.getConnectionUri());
    return async () => void (await container.stop());
  }
  throw new Error(
    `No SQS API: SQS_ENDPOINT is unset, the fauxqs emulator could not start (${String((emulatorProblem as Error)?.message ?? emulatorProblem)}) ` +
      'and there is no Docker engine for LocalStack. Install fauxqs in packages/sqs or set SQS_ENDPOINT.',
  );
}
