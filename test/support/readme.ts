import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { watchOutput } from './child-output.js';

/** One ```ts block of a README, with the hidden prelude (`<!-- ts-prelude ... -->`) written right above it. */
export interface ReadmeSnippet {
  /** The code users see and copy. */
  code: string;
  /** Declarations that make a fragment compile (what the surrounding prose assumes); '' for complete programs. */
  prelude: string;
  /** 1-based line of the opening fence, for error messages. */
  line: number;
}

const FENCE = /^( *)```ts\s*$/;
const PRELUDE_START = '<!-- ts-prelude';

/** The prelude comment that ends right above a fence (only blank lines between), or ''. */
function preludeBefore(text: string): string {
  const start = text.lastIndexOf(PRELUDE_START);
  if (start < 0) return '';
  const end = text.indexOf('-->', start);
  if (end < 0 || text.slice(end + 3).trim() !== '') return '';
  return text.slice(start + PRELUDE_START.length, end).replace(/^\s*\n/, '');
}

/** Every ```ts block of a Markdown text, in order. Indented fences (inside list items) count too. */
export function readmeSnippets(markdown: string): ReadmeSnippet[] {
  const lines = markdown.split('\n');
  const snippets: ReadmeSnippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!);
    if (open === null) continue;
    const indent = open[1]!.length;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && lines[j]!.trim() !== '```'; j++) body.push(lines[j]!.slice(indent));
    snippets.push({ code: body.join('\n'), prelude: preludeBefore(lines.slice(Math.max(0, i - 40), i).join('\n')), line: i + 1 });
    i = j;
  }
  return snippets;
}

/** The quick start of a package: the first ```ts block of its README, a complete program. */
export function quickStartOf(readmePath: string): string {
  const [first] = readmeSnippets(readFileSync(readmePath, 'utf8'));
  if (first === undefined || first.prelude !== '') throw new Error(`${readmePath} has no complete quick start as its first ts block`);
  return first.code;
}

/** A running quick start: its output so far, a way to wait for a line, and SIGTERM. */
export interface RunningQuickStart {
  output(): string;
  waitForOutput(text: string, timeoutMs?: number): Promise<void>;
  /** Sends SIGTERM and resolves with the exit code (null when it had to be killed). */
  stop(timeoutMs?: number): Promise<number | null>;
}

const repositoryRoot = fileURLToPath(new URL('../../', import.meta.url));

/**
 * Runs a README quick start as users would: the code, as written, in its own Node process (with
 * tsx, and the workspace's source condition), from a file inside `packageDir` so its imports resolve
 * through that package's dependencies. Configuration reaches it only through `env`.
 */
export async function startQuickStart(options: {
  readme: string;
  packageDir: string;
  env: Record<string, string>;
  readyLine: string;
  timeoutMs?: number;
}): Promise<RunningQuickStart> {
  const dir = path.join(options.packageDir, '.tmp');
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `quick-start-${process.pid}-${Date.now()}.ts`);
  writeFileSync(file, quickStartOf(options.readme));
  const child: ChildProcess = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', file], {
    cwd: repositoryRoot,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const watched = watchOutput(child, 'the quick start');
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      rmSync(file, { force: true });
      resolve(code);
    }),
  );
  const running: RunningQuickStart = {
    output: watched.output,
    waitForOutput: (text, timeoutMs = 20_000) => watched.waitFor(text, timeoutMs),
    async stop(timeoutMs = 15_000) {
      if (child.exitCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
  await running.waitForOutput(options.readyLine, options.timeoutMs ?? 30_000);
  return running;
}

/** `url` with `search_path` set to `schema` for every connection, so unqualified tables land there. */
export function withSearchPath(url: string, schema: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set('options', `-c search_path=${schema}`);
  return parsed.toString();
}
