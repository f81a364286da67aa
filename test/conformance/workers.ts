import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { watchOutput } from '@inboxed/test-support/child-output';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const workerScript = path.join(root, 'test', 'conformance', 'worker.ts');

/** A worker process (test/conformance/worker.ts) and what it printed. */
export interface Worker {
  readonly child: ChildProcess;
  /** Every `settling <status> <id>` line so far, as [status, id]. */
  readonly settling: [status: string, id: string][];
  output(): string;
  /** Resolves once a line containing `text` was printed (or rejects when the worker exits first). */
  waitFor(text: string, timeoutMs?: number): Promise<void>;
  /** Resolves with the exit code and signal once the worker exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal?: NodeJS.Signals): void;
}

/** Starts the shared worker with the harness's environment plus `env` (BROKER, DATABASE_URL, SCHEMA, CONSUMER_NAME, MODE, CRASH). */
export function startWorker(env: Record<string, string>): Worker {
  const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', workerScript], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const settling: [string, string][] = [];
  let buffered = '';
  const watched = watchOutput(child, 'worker', (chunk) => {
    buffered += chunk;
    const lines = buffered.split('\n');
    buffered = lines.pop()!;
    for (const line of lines) {
      const match = /^settling (\S+) (.*)$/.exec(line);
      if (match) settling.push([match[1]!, match[2]!]);
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    settling,
    output: watched.output,
    exited,
    kill: (signal = 'SIGKILL') => void child.kill(signal),
    waitFor: (text, timeoutMs = 30_000) => watched.waitFor(text, timeoutMs),
  };
}
