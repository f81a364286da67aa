import type { ChildProcess } from 'node:child_process';

/** What a child process printed, and a way to wait for a line of it. */
export interface ChildOutput {
  /** stdout and stderr so far, interleaved as they arrived. */
  output(): string;
  /** Resolves once `text` was printed; rejects when the process exits first or `timeoutMs` passes (with the output). */
  waitFor(text: string, timeoutMs: number): Promise<void>;
}

/**
 * Collects a child's stdout and stderr and lets tests wait for a line, failing fast (with everything
 * it printed) when the process dies first. `onStdout` sees stdout chunks for protocol parsing.
 */
export function watchOutput(child: ChildProcess, name: string, onStdout: (chunk: string) => void = () => {}): ChildOutput {
  let output = '';
  const waiters = new Set<() => void>();
  const wake = () => {
    for (const waiter of waiters) waiter();
  };
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    onStdout(chunk.toString());
    wake();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    wake();
  });
  child.once('exit', wake);
  return {
    output: () => output,
    waitFor(text, timeoutMs) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => done(new Error(`${name}: no ${JSON.stringify(text)} within ${timeoutMs} ms; output:\n${output}`)), timeoutMs);
        const check = () => {
          if (output.includes(text)) done();
          else if (child.exitCode !== null || child.signalCode !== null)
            done(new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before printing ${JSON.stringify(text)}; output:\n${output}`));
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
