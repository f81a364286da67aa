// Writes test/support/file-durations.json from vitest's result cache of the last full run
// (node_modules/.vite/vitest/*/results.json): the order test/support/longest-first-sequencer.ts
// runs files in on a clean clone. Run it after a full `pnpm test` when files were added or their
// length changed a lot; an outdated table only makes CI's schedule a little less even.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const cacheDir = path.join(root, 'node_modules', '.vite', 'vitest');
const durations = {};
for (const entry of readdirSync(cacheDir)) {
  const file = path.join(cacheDir, entry, 'results.json');
  let results;
  try {
    results = JSON.parse(readFileSync(file, 'utf8')).results;
  } catch {
    continue;
  }
  for (const [key, { duration }] of results) durations[key] = Math.round(duration / 100) / 10;
}
const sorted = Object.fromEntries(Object.entries(durations).sort(([a], [b]) => a.localeCompare(b)));
const target = path.join(root, 'test', 'support', 'file-durations.json');
writeFileSync(target, `${JSON.stringify(sorted, null, 2)}\n`);
console.log(`${Object.keys(sorted).length} files recorded in ${path.relative(root, target)}`);
