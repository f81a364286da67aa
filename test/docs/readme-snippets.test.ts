import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readmeSnippets } from '@inboxed/test-support';
import ts from 'typescript';
import { afterAll, describe, expect, it } from 'vitest';

// Every TypeScript block of every README type-checks as written, against the workspace's own
// packages: a README that does not compile is a bug. Fragments get the declarations the prose
// around them assumes from a hidden `<!-- ts-prelude ... -->` comment right above the block.
const root = fileURLToPath(new URL('../../', import.meta.url));

/** Each README and the package whose dependencies its snippets import (and are resolved from). */
const READMES: [readme: string, packageDir: string][] = [
  ['README.md', 'packages/core'],
  ['packages/core/README.md', 'packages/core'],
  ['packages/amqp/README.md', 'packages/amqp'],
  ['packages/kafka/README.md', 'packages/kafka'],
  ['packages/sqs/README.md', 'packages/sqs'],
  ['packages/cli/README.md', 'packages/cli'],
];

const written: string[] = [];
afterAll(() => {
  for (const dir of new Set(written.map((file) => path.dirname(file)))) rmSync(dir, { recursive: true, force: true });
});

interface Origin {
  readme: string;
  fence: number;
  preludeLines: number;
}

/** Writes each snippet as a module next to the package, remembering where it came from. */
function writeSnippets(): Map<string, Origin> {
  const origin = new Map<string, Origin>();
  for (const [readme, packageDir] of READMES) {
    const dir = path.join(root, packageDir, '.tmp', 'readme-snippets');
    mkdirSync(dir, { recursive: true });
    for (const snippet of readmeSnippets(readFileSync(path.join(root, readme), 'utf8'))) {
      const file = path.join(dir, `${readme.replace(/[/.]/g, '_')}-${snippet.line}.ts`);
      // The prelude's lines come first; `export {}` makes even an import-free fragment a module.
      writeFileSync(file, `${snippet.prelude}\n${snippet.code}\nexport {};\n`);
      origin.set(file, { readme, fence: snippet.line, preludeLines: snippet.prelude.split('\n').length });
      written.push(file);
    }
  }
  return origin;
}

describe('README snippets', () => {
  it('all type-check against the workspace packages', () => {
    const origin = writeSnippets();
    expect(origin.size).toBeGreaterThan(10);
    const config = ts.readConfigFile(path.join(root, 'tsconfig.base.json'), ts.sys.readFile);
    const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, root);
    const program = ts.createProgram([...origin.keys()], { ...options, noEmit: true, declaration: false, sourceMap: false });
    const problems = ts
      .getPreEmitDiagnostics(program)
      .filter((d) => d.file !== undefined && origin.has(path.normalize(d.file.fileName)))
      .map((d) => {
        const { line } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
        const from = origin.get(path.normalize(d.file!.fileName))!;
        const where =
          line < from.preludeLines
            ? `${from.readme}, the prelude of the block at line ${from.fence}`
            : `${from.readme}:${from.fence + 1 + line - from.preludeLines}`;
        return `${where}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      });
    expect(problems).toEqual([]);
  });
});
