/**
 * Memory: 3,000,000 messages (BENCH_MEMORY_MESSAGES) through `@inboxed/kafka` in batch mode
 * (withInboxBatch, one set-based `insert ... select from unnest(...)` per chunk) on librdkafka's
 * mock cluster, sampling this process's RSS and heap every few seconds. A leak shows as RSS that
 * keeps rising after the warm-up; a flat line is what a long-running consumer needs.
 *
 * Not part of the default `pnpm bench`; run it with `pnpm bench memory`. The records come from a
 * child process (bench/memory-producer.ts) in waves, at most BENCH_MEMORY_BACKLOG ahead of the
 * consumer, because the mock keeps only about 5 MB per partition and deletes older records.
 *
 * Env: BENCH_MEMORY_MESSAGES (default 3,000,000), BENCH_MEMORY_SAMPLE_MS (default 2000),
 * BENCH_MEMORY_BACKLOG (default 100,000), KAFKA_BROKERS (a real broker instead of the mock).
 */
import { fork } from 'node:child_process';
import { migrate, withInboxBatch } from '@inboxed/core';
import { createKafkaConsumer } from '@inboxed/kafka';
import { startKafkaMock, type KafkaMock } from '@inboxed/test-support/kafka-mock';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kafka, logLevel } from 'kafkajs';
import { benchPool, report, reportSection } from '../bench-kit.js';

// Three million, not the one million the issue asks for at least: a million takes about 50 s here,
// six or seven of the heap's GC sawtooth periods, and the least-squares slope over so few teeth
// swung from +0.5 to +3.5 MB per 100k between two runs of the same code; over three million it is
// the trend, not where the last tooth happened to fall.
const TOTAL = Number(process.env.BENCH_MEMORY_MESSAGES ?? 3_000_000);
const SAMPLE_MS = Number(process.env.BENCH_MEMORY_SAMPLE_MS ?? 2000);
const BACKLOG = Number(process.env.BENCH_MEMORY_BACKLOG ?? 100_000);
const PARTITIONS = 4;
const BATCH_SIZE = 500;
/** Messages after which the process counts as warmed up (caches, pools, JIT, kafkajs buffers). */
const WARM_UP = Math.max(BATCH_SIZE * PARTITIONS * 4, Math.round(TOTAL * 0.1));
/** Growth of RSS after the warm-up, over the rest of the run, below which the verdict is "flat". */
const FLAT_PCT = 5;
const GROUP_TIMINGS = { sessionTimeout: 6000, heartbeatInterval: 500, maxWaitTimeInMs: 100, rebalanceTimeout: 10000 };

type Payment = { id: number; amountCents: number; currency: string };

interface Sample {
  seconds: number;
  settled: number;
  rssMb: number;
  heapMb: number;
}

const mb = (bytes: number) => bytes / 2 ** 20;

export default async function memorySuite(): Promise<void> {
  let mock: KafkaMock | undefined;
  let brokers = process.env.KAFKA_BROKERS;
  if (!brokers) {
    mock = await startKafkaMock();
    brokers = mock.brokers;
  }
  const suffix = `${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  const topic = `bench_memory_${suffix}`;
  const schema = `bench_memory_${suffix}`;
  const pool = benchPool(8);
  const db = drizzle(pool);
  const kafka = new Kafka({ clientId: 'inboxed-bench-memory', brokers: brokers.split(','), logLevel: logLevel.NOTHING });
  const samples: Sample[] = [];
  let producer: ReturnType<typeof fork> | undefined;
  try {
    await mock?.createTopic(topic, PARTITIONS);
    await migrate(db, { schema });
    await pool.query(`create table "${schema}".payments (id integer primary key, amount_cents integer not null, currency text not null)`);
    const payments = sql.raw(`"${schema}".payments`);
    const processor = withInboxBatch<typeof db, Payment>(
      async (messages, tx) => {
        await tx.execute(sql`insert into ${payments} (id, amount_cents, currency)
          select * from unnest(${sql.param(messages.map((m) => m.payload.id))}::int[], ${sql.param(messages.map((m) => m.payload.amountCents))}::int[], ${sql.param(messages.map((m) => m.payload.currency))}::text[])`);
      },
      { db, consumer: 'bench.memory', tables: { schema } },
    );

    let settled = 0;
    let finish: () => void = () => {};
    const done = new Promise<void>((resolve) => (finish = resolve));
    const tick = () => {
      if (++settled >= TOTAL) finish();
    };
    const consumer = createKafkaConsumer({
      kafka,
      groupId: `bench-memory-${suffix}`,
      topics: [topic],
      handler: processor,
      batchSize: BATCH_SIZE,
      consumerConfig: GROUP_TIMINGS,
      idempotentDeadLetters: mock === undefined,
      partitionsConsumedConcurrently: PARTITIONS,
    });
    consumer.on('message_processed', tick);
    consumer.on('duplicate', tick);
    consumer.on('error', (error) => console.error('memory bench consumer error:', error));

    producer = fork(new URL('../memory-producer.ts', import.meta.url), [brokers, topic, String(PARTITIONS), String(TOTAL), String(BACKLOG)], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const producerExit = new Promise<number | null>((resolve) => producer?.once('exit', resolve));
    // The producer disconnects once it has produced everything; a send racing that is of no interest.
    producer.on('error', () => undefined);
    const tell = (count: number) => {
      if (producer?.connected) producer.send({ settled: count }, () => undefined);
    };

    const started = performance.now();
    const sample = () => {
      const usage = process.memoryUsage();
      samples.push({ seconds: (performance.now() - started) / 1000, settled, rssMb: mb(usage.rss), heapMb: mb(usage.heapUsed) });
    };
    sample();
    await consumer.start();
    const timer = setInterval(() => {
      sample();
      tell(settled);
      const last = samples[samples.length - 1]!;
      console.log(
        `  [memory] ${last.seconds.toFixed(0)} s: ${settled.toLocaleString('en-US')} settled, rss ${last.rssMb.toFixed(0)} MB, heap ${last.heapMb.toFixed(0)} MB`,
      );
    }, SAMPLE_MS);
    const feedback = setInterval(() => tell(settled), 200);
    const stalled = producerExit.then((code) => {
      if (code !== 0) throw new Error(`memory producer exited with code ${code}`);
      return new Promise<never>(() => {});
    });
    let firstAt = 0;
    consumer.on('message_processed', () => {
      if (firstAt === 0) firstAt = performance.now();
    });
    await Promise.race([done, stalled]);
    const seconds = (performance.now() - firstAt) / 1000;
    clearInterval(timer);
    clearInterval(feedback);
    sample();
    await consumer.stop();
    const [row] = (await pool.query<{ n: number }>(`select count(*)::int as n from "${schema}".payments`)).rows;
    if (row?.n !== TOTAL) throw new Error(`expected ${TOTAL} payments, found ${row?.n}`);

    report({
      suite: 'memory',
      mode: '@inboxed/kafka batch -> PostgreSQL (set-based insert)',
      messages: TOTAL,
      rounds: [TOTAL / seconds],
      note: `one run, ${BATCH_SIZE} per transaction, ${PARTITIONS} partitions consumed concurrently; librdkafka mock fed in waves of at most ${BACKLOG.toLocaleString('en-US')} records ahead`,
    });
    reportSection('memory', summarize(samples));
    console.log(summarize(samples));
  } finally {
    if (producer && producer.exitCode === null) producer.kill();
    await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
    await pool.end();
    await mock?.stop();
  }
}

/** Least-squares slope of y over x. */
function slope(points: { x: number; y: number }[]): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  const sxy = points.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0);
  const sxx = points.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  return sxx > 0 ? sxy / sxx : 0;
}

/** The markdown part of the results: start, after warm-up, peak, end, slope, verdict. */
function summarize(samples: Sample[]): string {
  const first = samples[0]!;
  const last = samples[samples.length - 1]!;
  const warmIndex = samples.findIndex((s) => s.settled >= WARM_UP);
  const warm = samples[warmIndex === -1 ? samples.length - 1 : warmIndex]!;
  const after = samples.slice(warmIndex === -1 ? samples.length - 1 : warmIndex);
  const peak = samples.reduce((p, s) => (s.rssMb > p.rssMb ? s : p), first);
  const heapPeak = samples.reduce((p, s) => (s.heapMb > p.heapMb ? s : p), first);
  const per100k = (key: 'rssMb' | 'heapMb') => slope(after.map((s) => ({ x: s.settled / 100_000, y: s[key] })));
  const rssSlope = per100k('rssMb');
  const heapSlope = per100k('heapMb');
  const remaining100k = (last.settled - warm.settled) / 100_000;
  const growthPct = warm.rssMb > 0 ? ((rssSlope * remaining100k) / warm.rssMb) * 100 : 0;
  const endPct = warm.rssMb > 0 ? ((last.rssMb - warm.rssMb) / warm.rssMb) * 100 : 0;
  const flat = growthPct < FLAT_PCT;
  const row = (label: string, s: Sample) =>
    `| ${label} | ${s.seconds.toFixed(0)} | ${s.settled.toLocaleString('en-US')} | ${s.rssMb.toFixed(0)} | ${s.heapMb.toFixed(0)} |`;
  return [
    `Memory of the consuming process, sampled every ${SAMPLE_MS / 1000} s (${samples.length} samples); warm-up = the first ${WARM_UP.toLocaleString('en-US')} messages.`,
    '',
    '| point | s | messages settled | RSS MB | heap used MB |',
    '|---|--:|--:|--:|--:|',
    row('start', first),
    row('after warm-up', warm),
    row(`peak RSS`, peak),
    row(`peak heap`, heapPeak),
    row('end', last),
    '',
    `Slope after warm-up (least squares over ${after.length} samples): RSS ${rssSlope.toFixed(2)} MB per 100k messages, heap used ${heapSlope.toFixed(2)} MB per 100k messages.`,
    `RSS growth after warm-up: ${growthPct.toFixed(1)}% by the slope over the remaining ${(remaining100k * 100_000).toLocaleString('en-US')} messages (end vs after warm-up: ${endPct >= 0 ? '+' : ''}${endPct.toFixed(1)}%).`,
    '',
    `**Verdict: ${flat ? 'flat' : 'growing'}** (flat = RSS growth after warm-up under ${FLAT_PCT}% of the RSS after warm-up, by the slope).`,
  ].join('\n');
}
