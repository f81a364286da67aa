import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The published packages, packed once by pack-setup.ts: package name -> absolute .tgz path. */
    tarballs: Record<string, string>;
  }
}

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The packages we publish, in build order (the adapters and the CLI compile against core's dist). */
export const PUBLISHED = [
  { name: '@inboxed/core', dir: 'packages/core' },
  { name: '@inboxed/amqp', dir: 'packages/amqp' },
  { name: '@inboxed/kafka', dir: 'packages/kafka' },
  { name: '@inboxed/sqs', dir: 'packages/sqs' },
  { name: '@inboxed/cli', dir: 'packages/cli' },
] as const;

export interface CommandResult {
  command: string;
  code: number | null;
  stdout: string;
  stderr: string;
}

const ANSI = new RegExp(`${String.fromCharCode(27)}\\[[0-9;?]*[A-Za-z]`, 'g');

/** Terminal output as text: colours and cursor moves removed, spinner redraws (`\r`) as new lines. */
export function plain(text: string): string {
  return text.replace(ANSI, '').replace(/\r\n?/g, '\n');
}

/**
 * The environment of a user's shell: this run's variables minus what pnpm and vitest add (npm_config_*
 * from `pnpm test` would change how npm installs; NODE_OPTIONS could carry our source condition).
 */
export function userEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (/^(npm_|pnpm_|PNPM_|VITEST|NODE_OPTIONS$|TURBO_)/i.test(key)) continue;
    env[key] = value;
  }
  return { ...env, NO_COLOR: '1', FORCE_COLOR: '0', ...extra };
}

/** Runs a command to completion (no shell), capturing its output; never throws on a non-zero exit. */
export function runCommand(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<CommandResult> {
  const line = [command, ...args].join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? userEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${line}: ${error.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ command: line, code, stdout: plain(stdout), stderr: plain(stderr) });
    });
  });
}

/** The output of a command, for assertion messages. */
export function transcript(result: CommandResult): string {
  return `$ ${result.command}\n(exit ${result.code})\n--- stdout\n${result.stdout.trim()}\n--- stderr\n${result.stderr.trim()}`;
}

/** Runs a command and throws with its transcript unless it exits 0. */
export async function mustRun(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<CommandResult> {
  const result = await runCommand(command, args, options);
  if (result.code !== 0) throw new Error(`command failed\n${transcript(result)}`);
  return result;
}
