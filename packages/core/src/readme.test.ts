import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, expect, it, vi } from 'vitest';

// The README's first TypeScript block is the quick start users copy: run it, as written.
const tmpDir = new URL('../.tmp/', import.meta.url);

afterAll(() => rmSync(tmpDir, { recursive: true, force: true }));

it('the README quick start runs and prints processed, then duplicate', async () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const snippet = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(snippet).toBeDefined();
  mkdirSync(tmpDir, { recursive: true });
  const file = new URL(`quick-start-${process.pid}.ts`, tmpDir);
  writeFileSync(file, snippet!);
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import(file.href);
    expect(log.mock.calls.map((c) => c[0])).toEqual(['processed', 'duplicate']);
  } finally {
    log.mockRestore();
  }
});
