import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { mustRun, PUBLISHED, repoRoot } from './support.js';

/**
 * Vitest global setup: packs every published package once, exactly as `pnpm publish` would
 * (`prepack` cleans and rebuilds dist, `publishConfig` replaces the monorepo-only exports,
 * `workspace:` ranges become versions), into a temporary folder the tests share.
 *
 * `INBOXED_PACK_BUILT_DIST=1` skips `prepack`: the dist folders are packed as they are (they must be
 * current). For a run while others edit the sources, which a rebuild would delete and recompile.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dir = await mkdtemp(join(tmpdir(), 'inboxed-tarballs-'));
  const tarballs: Record<string, string> = {};
  // One after the other: the adapters compile against core's freshly built dist.
  for (const pkg of PUBLISHED) {
    const cwd = join(repoRoot, pkg.dir);
    const { version } = JSON.parse(readFileSync(join(cwd, 'package.json'), 'utf8')) as { version: string };
    const builtDist = process.env.INBOXED_PACK_BUILT_DIST === '1' ? ['--config.ignore-scripts=true'] : [];
    await mustRun('pnpm', ['pack', ...builtDist, '--pack-destination', dir], { cwd, env: process.env, timeoutMs: 180_000 });
    const tarball = join(dir, `${pkg.name.replace('@', '').replace('/', '-')}-${version}.tgz`);
    if (!existsSync(tarball)) throw new Error(`pnpm pack did not write ${tarball}`);
    tarballs[pkg.name] = tarball;
  }
  project.provide('tarballs', tarballs);
  return async () => {
    await rm(dir, { recursive: true, force: true });
  };
}
