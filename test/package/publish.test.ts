import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import getReleasePlan from '@changesets/get-release-plan';
import { publint } from 'publint';
import { formatMessage } from 'publint/utils';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { mustRun, PUBLISHED, repoRoot, runCommand, transcript } from './support.js';

// What npm would publish, checked from the tarballs themselves: publint, arethetypeswrong (ESM-only
// profile: these packages are ESM only; require() of them needs Node ^20.19 || >=22.12), and the
// manifest rules of issue 9 that neither tool knows.

const REPOSITORY = 'https://github.com/inboxed/inboxed';

interface Manifest {
  name: string;
  version: string;
  license?: string;
  type?: string;
  sideEffects?: boolean;
  engines?: { node?: string };
  homepage?: string;
  bugs?: { url?: string };
  repository?: { type?: string; url?: string; directory?: string };
  exports: Record<string, string | Record<string, string>>;
  files?: string[];
  scripts?: Record<string, string>;
  publishConfig?: Record<string, unknown>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  bin?: Record<string, string>;
}

/** Enough of semver for the peer range we publish, `>=a.b.c <n`. */
function semverSatisfies(version: string, range: string | undefined): boolean {
  const parse = (v: string) => v.split('.').map(Number) as [number, number, number];
  const compare = (a: string, b: string) => {
    const [x, y] = [parse(a), parse(b)];
    for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
    return 0;
  };
  const bounded = range?.match(/^>=(\d+\.\d+\.\d+) <(\d+)$/);
  if (bounded) return compare(version, bounded[1]!) >= 0 && parse(version)[0] < Number(bounded[2]);
  return false;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((file) => statSync(join(dir, file)).isFile())
    .map((file) => file.split('\\').join('/'))
    .sort();
}

/** Every module specifier of an emitted ES module: static imports and re-exports, and import(). */
function specifiersOf(code: string): string[] {
  const found = [
    ...code.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]/g),
    ...code.matchAll(/(?:^|\n)\s*import\s*['"]([^'"]+)['"]/g),
    ...code.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
  ];
  return found.map((match) => match[1]!);
}

/** The bare specifiers (packages) an entry point loads, following its relative imports. */
function packagesLoadedBy(entry: string): string[] {
  const seen = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const specifier of specifiersOf(readFileSync(file, 'utf8'))) {
      if (specifier.startsWith('.')) visit(resolve(dirname(file), specifier));
      else packages.add(specifier);
    }
  };
  visit(entry);
  return [...packages].sort();
}

let unpacked: string;
const tarballs = inject('tarballs');

beforeAll(async () => {
  unpacked = await mkdtemp(join(tmpdir(), 'inboxed-unpacked-'));
  for (const pkg of PUBLISHED) {
    const into = join(unpacked, pkg.name);
    await mustRun('mkdir', ['-p', into], { cwd: unpacked });
    await mustRun('tar', ['-xzf', tarballs[pkg.name]!, '-C', into, '--strip-components=1'], { cwd: unpacked });
  }
});

afterAll(async () => {
  if (unpacked !== undefined) await rm(unpacked, { recursive: true, force: true });
});

describe.each(PUBLISHED.map((pkg) => [pkg.name, pkg] as const))('%s as published', (name, pkg) => {
  const root = () => join(unpacked, name);
  const manifest = () => JSON.parse(readFileSync(join(root(), 'package.json'), 'utf8')) as Manifest;

  it('passes publint (strict, suggestions included)', async () => {
    const tarball = await readFile(tarballs[name]!);
    const result = await publint({
      pack: { tarball: tarball.buffer.slice(tarball.byteOffset, tarball.byteOffset + tarball.byteLength) as ArrayBuffer },
      level: 'suggestion',
      strict: true,
    });
    const messages = result.messages.map((message) => `${message.type}: ${formatMessage(message, result.pkg, { color: false })}`);
    expect(messages, `publint on ${name}`).toEqual([]);
  });

  it('passes arethetypeswrong with the ESM-only profile', async () => {
    const attw = join(repoRoot, 'node_modules', '.bin', 'attw');
    const result = await runCommand(attw, [tarballs[name]!, '--profile', 'esm-only', '--no-definitely-typed', '--no-color', '--format', 'table-flipped'], {
      cwd: repoRoot,
    });
    expect(result.code, transcript(result)).toBe(0);
    expect(result.stdout).toMatch(/node16 \(from ESM\)/);
  });

  it('exports only what it ships: no monorepo-only condition, every target present, nothing else of src', () => {
    const m = manifest();
    expect(JSON.stringify(m.exports)).not.toContain('@inboxed/source');
    expect(JSON.stringify(m)).not.toContain('workspace:');
    expect(m.publishConfig?.exports, 'publishConfig.exports is applied by the packer, not shipped').toBeUndefined();
    const targets = Object.values(m.exports).flatMap((target) => (typeof target === 'string' ? [target] : Object.values(target)));
    for (const target of targets) expect(existsSync(join(root(), target)), `${target} is in the tarball`).toBe(true);
    const files = filesUnder(root());
    expect(files.filter((file) => file.startsWith('src/') || /\.test(-d)?\.|__tests__/.test(file))).toEqual([]);
    expect(files).toEqual(expect.arrayContaining(['LICENSE', 'README.md', 'package.json']));
    expect(readFileSync(join(root(), 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
  });

  it('source maps carry their sources, since src/ is not shipped', () => {
    const maps = filesUnder(root()).filter((file) => file.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(0);
    for (const map of maps) {
      const { sources, sourcesContent } = JSON.parse(readFileSync(join(root(), map), 'utf8')) as { sources: string[]; sourcesContent?: (string | null)[] };
      expect(sourcesContent?.length, map).toBe(sources.length);
      expect(
        sourcesContent?.every((content) => typeof content === 'string' && content.length > 0),
        map,
      ).toBe(true);
    }
  });

  it('declares what a registry page and a user need: license, links, engines, ESM, side effects', () => {
    const m = manifest();
    expect(m).toMatchObject({
      license: 'MIT',
      type: 'module',
      sideEffects: false,
      engines: { node: '^20.19.0 || >=22.12.0' },
      homepage: `${REPOSITORY}/tree/main/${pkg.dir}#readme`,
      bugs: { url: `${REPOSITORY}/issues` },
      repository: { type: 'git', url: `git+${REPOSITORY}.git`, directory: pkg.dir },
    });
    if (name === '@inboxed/cli') {
      // An application, not a library: it brings its own driver and parser, and exactly its own core.
      expect(Object.keys(m.dependencies ?? {}).sort()).toEqual(['@inboxed/core', 'commander', 'drizzle-orm', 'pg']);
      expect(m.dependencies?.['@inboxed/core']).toBe(m.version);
      expect(m.bin).toEqual({ inboxed: './dist/cli.js' });
      expect(readFileSync(join(root(), 'dist/cli.js'), 'utf8')).toMatch(/^#!\/usr\/bin\/env node\n/);
      return;
    }
    expect(m.dependencies ?? {}).toEqual({});
    // A range, not ^version: see the release plan test below.
    if (name !== '@inboxed/core') expect(semverSatisfies(m.version, m.peerDependencies?.['@inboxed/core'])).toBe(true);
  });
});

describe('the monorepo manifests', () => {
  it.each(PUBLISHED.map((pkg) => [pkg.name, pkg] as const))('%s rebuilds dist before packing', (_name, pkg) => {
    const m = JSON.parse(readFileSync(join(repoRoot, pkg.dir, 'package.json'), 'utf8')) as Manifest;
    expect(m.scripts?.prepack).toMatch(/clean.*build/);
    expect(existsSync(join(repoRoot, pkg.dir, 'LICENSE'))).toBe(true);
  });

  it('the root has the LICENSE the packages copy', () => {
    const license = readFileSync(join(repoRoot, 'LICENSE'), 'utf8');
    for (const pkg of PUBLISHED) expect(readFileSync(join(repoRoot, pkg.dir, 'LICENSE'), 'utf8'), pkg.dir).toBe(license);
  });
});

describe('versioning with Changesets', () => {
  it('pending changesets release the published packages together, at the bump the changesets ask for', async () => {
    const plan = await getReleasePlan(repoRoot);
    const names = PUBLISHED.map((pkg) => pkg.name);
    const order = ['none', 'patch', 'minor', 'major'];
    const asked = plan.changesets.flatMap((changeset) => changeset.releases).filter((release) => names.includes(release.name as (typeof names)[number]));
    if (asked.length === 0) return; // nothing pending since the last release
    const highest = asked.map((release) => release.type).sort((a, b) => order.indexOf(b) - order.indexOf(a))[0];
    const releases = plan.releases.filter((release) => names.includes(release.name as (typeof names)[number]));
    expect(releases.map((release) => release.name).sort()).toEqual([...names].sort());
    expect(new Set(releases.map((release) => release.newVersion)).size, 'one fixed group, one version').toBe(1);
    // Changesets 2 escalates a peer dependent to major when a minor bump leaves its peer range
    // (^0.1.0 -> 0.2.0 would make 1.0.0 of every package); the adapters' peer range on core is
    // ">=0.1.0 <1" for that reason. Whatever the cause, nothing may be bumped more than asked.
    for (const release of releases) expect(release.type, `${release.name} ${release.oldVersion} -> ${release.newVersion}`).toBe(highest);
  });
});

describe('@inboxed/core/schema', () => {
  it('loads nothing but drizzle-orm (pg-core, and sql for the partial index), so drizzle-kit never evaluates the rest of inboxed', () => {
    const core = join(unpacked, '@inboxed/core');
    const entry = (manifest: Manifest) => (manifest.exports['./schema'] as Record<string, string>).default!;
    const m = JSON.parse(readFileSync(join(core, 'package.json'), 'utf8')) as Manifest;
    const loaded = packagesLoadedBy(join(core, entry(m)));
    expect(loaded).toEqual(['drizzle-orm', 'drizzle-orm/pg-core']);
    // Sanity check of the walker itself: the main entry loads more.
    expect(packagesLoadedBy(join(core, (m.exports['.'] as Record<string, string>).default!))).toEqual(
      expect.arrayContaining(['drizzle-orm', 'drizzle-orm/pg-core']),
    );
    expect(relative(core, join(core, entry(m)))).toBe('dist/schema-entry.js');
  });
});
