import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createKafkaTopic, kafkaBrokers } from '@inboxed/test-support/kafka-topics';
import { Kafka, logLevel, type IHeaders, type KafkaMessage } from 'kafkajs';

import { GROUP_TIMINGS } from './kafka-test-timings.js';

export { GROUP_TIMINGS };

/**
 * Options every test consumer gets. Dead-letters use the adapter's default, the idempotent
 * producer: the test setup's proxy gives the mock broker the controller kafkajs needs for it.
 */
export function brokerOptions(): { consumerConfig: typeof GROUP_TIMINGS; idempotentDeadLetters: boolean } {
  return { consumerConfig: GROUP_TIMINGS, idempotentDeadLetters: true };
}

/** A kafkajs client for the test broker. */
export function testKafka(clientId = 'inboxed-test'): Kafka {
  return new Kafka({ clientId, brokers: kafkaBrokers(), logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
}

/** Creates a topic with the partition count the test needs. */
export async function createTopic(kafka: Kafka, topic: string, partitions: number): Promise<void> {
  await createKafkaTopic(kafka, topic, partitions);
}

/** A record to produce in tests. */
export interface TestRecord {
  value: string | Buffer | object;
  partition?: number;
  key?: string;
  headers?: IHeaders;
  id?: string;
}

/** Produces records (acks -1), `id` going into the `message-id` header. */
export async function produce(kafka: Kafka, topic: string, records: TestRecord[]): Promise<void> {
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  try {
    await producer.send({
      topic,
      acks: -1,
      messages: records.map((r) => ({
        value: typeof r.value === 'string' || Buffer.isBuffer(r.value) ? r.value : JSON.stringify(r.value),
        ...(r.partition !== undefined ? { partition: r.partition } : {}),
        ...(r.key !== undefined ? { key: r.key } : {}),
        headers: { ...(r.headers ?? {}), ...(r.id !== undefined ? { 'message-id': r.id } : {}) },
      })),
    });
  } finally {
    await producer.disconnect();
  }
}

/** Committed offsets of a group for a topic, by partition (-1 when none). */
export async function committedOffsets(kafka: Kafka, groupId: string, topic: string): Promise<Record<number, number>> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const [entry] = await admin.fetchOffsets({ groupId, topics: [topic] });
    const result: Record<number, number> = {};
    for (const p of entry?.partitions ?? []) result[p.partition] = Number(p.offset);
    return result;
  } finally {
    await admin.disconnect();
  }
}

/** A consumed record with its position. */
export type ReadRecord = KafkaMessage & {
  topic: string;
  partition: number;
  headerText: Record<string, string>;
};

/** Reads `count` records of `topic` from the beginning with a throwaway group. */
export async function readTopic(kafka: Kafka, topic: string, count: number, timeoutMs = 20_000): Promise<ReadRecord[]> {
  const consumer = kafka.consumer({ groupId: `reader-${topic}-${Math.random().toString(36).slice(2, 8)}`, ...GROUP_TIMINGS });
  const records: ReadRecord[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    let done: () => void = () => {};
    const enough = new Promise<void>((resolve) => (done = resolve));
    await consumer.run({
      eachMessage: async ({ topic: t, partition, message }) => {
        const headerText: Record<string, string> = {};
        for (const [name, value] of Object.entries(message.headers ?? {})) headerText[name] = String(Array.isArray(value) ? value[0] : value);
        records.push({ ...message, topic: t, partition, headerText });
        if (records.length >= count) done();
      },
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      enough,
      new Promise(
        (_, reject) => (timer = setTimeout(() => reject(new Error(`read ${records.length}/${count} records of ${topic} in ${timeoutMs} ms`)), timeoutMs)),
      ),
    ]);
    clearTimeout(timer);
    return records;
  } finally {
    await consumer.disconnect();
  }
}

/** A consumer running in a child process (test/kafka-child-consumer.ts). */
export interface ChildConsumer {
  /** Every stdout line so far. */
  readonly lines: string[];
  /** Resolves with the first line matching `pattern`. */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves when the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal: NodeJS.Signals): void;
}

/** Spawns a child consumer with `env` (see test/kafka-child-consumer.ts). */
export function spawnChildConsumer(env: Record<string, string>): ChildConsumer {
  const script = fileURLToPath(new URL('./kafka-child-consumer.ts', import.meta.url));
  const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', script], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: { ...process.env, KAFKA_BROKERS: kafkaBrokers().join(','), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let wake: Array<() => void> = [];
  const reader = createInterface({ input: child.stdout });
  reader.on('line', (line) => {
    lines.push(line);
    const pending = wake;
    wake = [];
    for (const w of pending) w();
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += String(chunk)));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      const pending = wake;
      wake = [];
      for (const w of pending) w();
      resolve({ code, signal });
    }),
  );
  return {
    lines,
    exited,
    kill: (signal) => void child.kill(signal),
    waitForLine(pattern, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no line matching ${pattern} within ${timeoutMs} ms; stdout: ${lines.join(' | ')}; stderr: ${stderr}`)),
          timeoutMs,
        );
        const check = () => {
          const found = lines.find((line) => pattern.test(line));
          if (found !== undefined) {
            clearTimeout(timer);
            resolve(found);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            clearTimeout(timer);
            reject(
              new Error(
                `child exited (${child.exitCode ?? child.signalCode}) before a line matching ${pattern}; stdout: ${lines.join(' | ')}; stderr: ${stderr}`,
              ),
            );
          } else {
            wake.push(check);
          }
        };
        check();
      });
    },
  };
}
