import { spawn, execFile, type ChildProcessByStdio } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const SOURCE = fileURLToPath(new URL('./kafka-mock/mock-cluster.c', import.meta.url));

/** A running librdkafka mock cluster (see kafka-mock/mock-cluster.c). */
export interface KafkaMock {
  /** `host:port[,host:port]` to hand to kafkajs as `brokers`. */
  brokers: string;
  /** Creates `topic` with `partitions` partitions (the mock has no CreateTopics API). Idempotent. */
  createTopic(topic: string, partitions: number): Promise<void>;
  /** Stops the broker process. */
  stop(): Promise<void>;
}

/**
 * Compiles the mock broker once per source version into the temp dir (gcc + Debian's
 * librdkafka-dev) and returns the binary's path. The build goes to a unique file that is renamed
 * into place, so parallel setups never run a half-written binary.
 */
export async function buildKafkaMock(): Promise<string> {
  const source = readFileSync(SOURCE);
  const hash = createHash('sha256').update(source).digest('hex').slice(0, 16);
  const dir = join(tmpdir(), 'inboxed-kafka-mock');
  const binary = join(dir, `mock-cluster-${hash}`);
  if (existsSync(binary)) return binary;
  mkdirSync(dir, { recursive: true });
  const partial = `${binary}.${process.pid}.tmp`;
  try {
    await promisify(execFile)('gcc', ['-O2', '-o', partial, SOURCE, '-lrdkafka']);
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr ?? String(error);
    throw new Error(`could not build the Kafka mock broker (needs gcc and librdkafka-dev: apt-get install -y gcc librdkafka-dev): ${stderr}`);
  }
  renameSync(partial, binary);
  return binary;
}

/** Starts a fresh mock cluster with `brokerCount` brokers on 127.0.0.1 (random ports). */
export async function startKafkaMock(brokerCount = 1): Promise<KafkaMock> {
  const binary = await buildKafkaMock();
  const child: ChildProcessByStdio<Writable, Readable, null> = spawn(binary, [String(brokerCount)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout });
  const waiting = new Map<string, Array<(line: string) => void>>();
  let bootstrap: ((brokers: string) => void) | undefined;
  let exited: Error | undefined;
  const brokersPromise = new Promise<string>((resolve, reject) => {
    bootstrap = resolve;
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      exited = new Error(`Kafka mock broker exited (code ${code}, signal ${signal})`);
      reject(exited);
      for (const callbacks of waiting.values()) for (const callback of callbacks) callback(`error - ${exited.message}`);
      waiting.clear();
    });
  });
  lines.on('line', (line) => {
    const [kind, subject = ''] = line.split(' ');
    if (kind === 'bootstrap') return bootstrap?.(subject);
    const callbacks = waiting.get(subject);
    const callback = callbacks?.shift();
    if (callbacks?.length === 0) waiting.delete(subject);
    callback?.(line);
  });
  const brokers = await brokersPromise;
  return {
    brokers,
    createTopic(topic, partitions) {
      if (exited) return Promise.reject(exited);
      if (!/^[\w.-]+$/.test(topic)) return Promise.reject(new Error(`invalid topic name: ${topic}`));
      return new Promise((resolve, reject) => {
        const callbacks = waiting.get(topic) ?? [];
        callbacks.push((line) => (line.startsWith('ok ') ? resolve() : reject(new Error(`mock broker could not create ${topic}: ${line}`))));
        waiting.set(topic, callbacks);
        child.stdin.write(`create ${topic} ${partitions}\n`);
      });
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise((resolve) => child.once('exit', resolve));
      child.stdin.end();
      child.kill('SIGTERM');
      await gone;
    },
  };
}
