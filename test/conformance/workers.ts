import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

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
  let output = '';
  const settling: [string, string][] = [];
  const waiters = new Set<() => void>();
  const wake = () => {
    for (const waiter of waiters) waiter();
  };
  let buffered = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    buffered += chunk.toString();
    const lines = buffered.split('\n');
    buffered = lines.pop()!;
    for (const line of lines) {
      const match = /^settling (\S+) (.*)$/.exec(line);
      if (match) settling.push([match[1]!, match[2]!]);
    }
    wake();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      wake();
      resolve({ code, signal });
    }),
  );
  return {
    child,
    settling,
    output: () => output,
    exited,
    kill: (signal = 'SIGKILL') => void child.kill(signal),
    waitFor(text, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => done(new Error(`worker: no "${text}" within ${timeoutMs} ms; output:\n${output}`)), timeoutMs);
        const check = () => {
          if (output.includes(text)) done();
          else if (child.exitCode !== null || child.signalCode !== null) done(new Error(`worker exited before "${text}"; output:\n${output}`));
        };
        function done(error?: Error) {
          clearTimeout(timer);
          waiters.delete(check);
          if (error === undefined) resolve();
          else reject(error);
        }
        waiters.add(check);
        check();
      });
    },
  };
}
