/**
 * What the broker suites (amqp, kafka, sqs) share: the workload (an `orders` domain table and its
 * set-based insert, written the same way with and without inboxed), a per-message clock that
 * every line of a suite is measured with, and the round runner that alternates the lines' order.
 *
 * Every line is timed with the same {@link Tracker}: a message is "received" when the broker
 * client hands it to the application and "settled" when its ack / offset commit / delete is sent
 * (the suites hook the broker client, so the adapter and the hand-written consumers are clocked at
 * the same points). Throughput is messages / (first receipt .. last settle), so connection set-up
 * and consumer-group joins count against no line.
 */
import { execFileSync } from 'node:child_process';
import type { InboxMessage } from '@inboxed/core';
import { sql } from 'drizzle-orm';
import { integer, pgSchema, text } from 'drizzle-orm/pg-core';
import type pg from 'pg';
import { benchMaxRounds, benchPrecision, cpuSince, machineCpu, percentile, ratioKnown, stats, type BenchLine } from './bench-kit.js';

/** The payload every message carries. */
export interface Order {
  orderId: number;
  amount: number;
  customer: string;
}

/** The order of message number `n` (unique over a suite's run). */
export function orderOf(n: number): Order {
  return { orderId: n, amount: n % 100, customer: `c-${n % 997}` };
}

/** A UUID-shaped message id for message number `n` (the peer inbox keys its rows by uuid). */
export function messageUuid(n: number): string {
  return `00000000-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
}

/** Creates `<schema>.orders`, the domain table every line writes to. */
export async function createOrdersTable(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`create schema if not exists "${schema}"`);
  await pool.query(`create table "${schema}".orders (order_id integer primary key, message_id text not null, amount integer not null, customer text not null)`);
}

/** The drizzle table of `<schema>.orders`. */
export function ordersTable(schema: string) {
  return pgSchema(schema).table('orders', {
    orderId: integer('order_id').primaryKey(),
    messageId: text('message_id').notNull(),
    amount: integer('amount').notNull(),
    customer: text('customer').notNull(),
  });
}

/** One message of the workload as a hand-written consumer sees it. */
export interface OrderMessage {
  id: string;
  order: Order;
}

/**
 * The bare path: one transaction on a pool client, the set-based insert (one
 * `INSERT ... SELECT FROM unnest(arrays)` for all `messages`), COMMIT. No inbox table.
 */
export async function insertOrdersBare(pool: pg.Pool, schema: string, messages: readonly OrderMessage[]): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query(
      `insert into "${schema}".orders (order_id, message_id, amount, customer) select * from unnest($1::int[], $2::text[], $3::int[], $4::text[])`,
      [messages.map((m) => m.order.orderId), messages.map((m) => m.id), messages.map((m) => m.order.amount), messages.map((m) => m.order.customer)],
    );
    await client.query('commit');
    client.release();
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    client.release(error as Error);
    throw error;
  }
}

/** The same set-based insert inside inboxed's transaction (`withInboxBatch` / `withInbox` handlers). */
export function insertOrdersInTx(schema: string) {
  const orders = ordersTable(schema);
  return async (messages: readonly InboxMessage<Order>[], tx: { execute(query: ReturnType<typeof sql>): Promise<unknown> }): Promise<void> => {
    await tx.execute(sql`insert into ${orders} (order_id, message_id, amount, customer)
      select * from unnest(${sql.param(messages.map((m) => m.payload.orderId))}::int[], ${sql.param(messages.map((m) => m.id))}::text[],
                           ${sql.param(messages.map((m) => m.payload.amount))}::int[], ${sql.param(messages.map((m) => m.payload.customer))}::text[])`);
  };
}

/**
 * Readies the next line, right before its clock starts: empties `tables` (the domain table, and the
 * inbox tables where the line writes them; none for a line without a database), then lets the
 * machine {@link settle}, so every line starts alike.
 */
export async function resetForLine(pool: pg.Pool, tables: readonly string[]): Promise<void> {
  if (tables.length > 0) await pool.query(`truncate ${tables.join(', ')}`);
  await settle(pool);
}

/** A machine is quiet when under this share of all its cores is busy, for {@link QUIET_SAMPLES} samples in a row. */
const QUIET_SHARE = 0.15;
const QUIET_SAMPLE_MS = 250;
const QUIET_SAMPLES = 2;
/** The longest a line waits for quiet; a machine busy with someone else's work is measured as it is. */
const QUIET_LIMIT_MS = 20_000;
let checkpointRefused = false;

/**
 * Lets the machine settle right before a line's clock starts, after its set-up (pre-filling the
 * broker, emptying the tables): a CHECKPOINT, so no checkpoint's writes fall inside a line, then
 * `sync`, then a wait until the CPU is quiet (under 15% of all cores busy for half a second, at most
 * 20 s), so what a line leaves running (RabbitMQ removing the messages it acked, autovacuum on the
 * tables it filled, the broker persisting a pre-fill) runs inside no line's clock. (On its own it did
 * not end the batch lines' round-to-round swings; those lines were too short, see the suites' sizes.)
 */
export async function settle(pool: pg.Pool): Promise<void> {
  const started = performance.now();
  if (!checkpointRefused) {
    await pool.query('checkpoint').catch((error: unknown) => {
      // CHECKPOINT needs superuser or pg_checkpoint; without it the lines still run, only less alike.
      checkpointRefused = true;
      console.warn(`    (no CHECKPOINT between lines: ${String(error)})`);
    });
  }
  try {
    execFileSync('sync');
  } catch {
    // Not every platform has sync(1); the checkpoint already flushed PostgreSQL's files.
  }
  let previous = machineCpu();
  if (previous === undefined) return;
  let quietSamples = 0;
  let share = 1;
  while (quietSamples < QUIET_SAMPLES && performance.now() - started < QUIET_LIMIT_MS) {
    await new Promise((resolve) => setTimeout(resolve, QUIET_SAMPLE_MS));
    const now = machineCpu()!;
    share = (now.busy - previous.busy) / Math.max(1, now.total - previous.total);
    previous = now;
    quietSamples = share < QUIET_SHARE ? quietSamples + 1 : 0;
  }
  if (quietSamples < QUIET_SAMPLES)
    console.warn(`    (the machine stayed busy: ${Math.round(share * 100)}% of all cores after ${QUIET_LIMIT_MS / 1000} s; measuring anyway)`);
}

/** Throws unless `<table>` holds exactly `expected` rows (`where` narrows it). */
export async function expectRows(pool: pg.Pool, table: string, expected: number, label: string, where = ''): Promise<void> {
  const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from ${table} ${where}`);
  if (rows[0]?.n !== expected) throw new Error(`${label}: expected ${expected} rows in ${table}${where ? ` ${where}` : ''}, found ${rows[0]?.n}`);
}

/** One measured run of one line. */
export interface Sample {
  perSecond: number;
  seconds: number;
  p50Ms: number;
  p99Ms: number;
  /** Messages settled (the target count, or a few more when concurrent work finished past it). */
  settled: number;
  /** CPU time of this Node process per message over the measured window, in µs (see BenchLine.cpuUsPerMessage). */
  cpuUs?: number;
}

/**
 * The per-message clock of one run: `received(key)` when the broker client delivers a message,
 * `settled(key)` when its ack / commit / delete went out. `done` resolves once `expected` distinct
 * messages were settled. A key settled twice (a redelivery) counts once, at its first settle.
 */
export class Tracker {
  private readonly receivedAt = new Map<string, number>();
  private readonly latencies: number[] = [];
  private first = 0;
  private last = 0;
  private count = 0;
  /** Process CPU at the first receipt, and used from then to the `expected`-th settle (µs). */
  private cpuAtFirst: NodeJS.CpuUsage | undefined;
  private cpuUsed = 0;
  private finish: () => void = () => {};
  readonly done: Promise<void>;

  constructor(readonly expected: number) {
    this.done = new Promise<void>((resolve) => (this.finish = resolve));
  }

  received(key: string, at = performance.now()): void {
    if (this.first === 0) {
      this.first = at;
      this.cpuAtFirst = process.cpuUsage();
    }
    if (!this.receivedAt.has(key)) this.receivedAt.set(key, at);
  }

  settled(key: string, at = performance.now()): void {
    const t0 = this.receivedAt.get(key);
    if (t0 === undefined || t0 < 0) return;
    this.receivedAt.set(key, -1);
    this.latencies.push(at - t0);
    this.last = at;
    if (++this.count === this.expected) {
      if (this.cpuAtFirst !== undefined) this.cpuUsed = cpuSince(this.cpuAtFirst);
      this.finish();
    }
  }

  /** Messages settled so far. */
  get settledCount(): number {
    return this.count;
  }

  /** Throughput over the first `expected` settles; latency percentiles over every settle. */
  sample(): Sample {
    const seconds = (this.last - this.first) / 1000;
    return {
      perSecond: seconds > 0 ? this.expected / seconds : 0,
      seconds,
      p50Ms: percentile(this.latencies, 0.5),
      p99Ms: percentile(this.latencies, 0.99),
      settled: this.count,
      cpuUs: this.cpuUsed / this.expected,
    };
  }
}

/** Rejects after `ms` with a message naming the run, so a stuck run fails the suite instead of hanging. */
export async function within<T>(promise: Promise<T>, ms: number, label: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${label}: not finished within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** One line of a suite: how to run one round of it, and how to report it. */
export interface LineSpec {
  /** The line's `mode` in the report (unique within the suite). */
  mode: string;
  messages: number;
  run: (round: number) => Promise<Sample>;
  baseline?: string;
  target?: BenchLine['target'];
  /**
   * The line's ratio is the evidence for a limit (the floor or ceiling a target is measured
   * against), so it gets the extra rounds a targeted ratio gets: a limit known only to ±20% cannot
   * say whether a target is out of reach.
   */
  limit?: boolean;
  note?: string;
}

/**
 * Runs every line once per round, the order reversed on every other round (so each bare/inboxed
 * pair, listed next to each other, alternates which goes first, and no line always runs right
 * after the same neighbour), then reports each line with its per-round throughput and the median
 * round's latency percentiles. A line with a ratio target (or marked as a `limit`) then gets extra
 * rounds, run with its baseline alone, until that ratio is known to `BENCH_PRECISION` or the suite reaches
 * `BENCH_MAX_ROUNDS` (see `medianPrecision`). Lines are reported in the given order: put a baseline before the
 * lines compared with it. `BENCH_LINES` (comma-separated words) keeps only the lines whose mode
 * contains one of them, for development runs.
 */
export async function runLines(suite: string, rounds: number, allSpecs: readonly LineSpec[], report: (line: BenchLine) => void): Promise<void> {
  // BENCH_LINES=peer,batch (development): only the lines whose mode contains one of the words.
  const only = process.env.BENCH_LINES?.split(',').filter(Boolean);
  const specs = only ? allSpecs.filter((s) => only.some((word) => s.mode.includes(word))) : allSpecs;
  const samples = new Map<string, Sample[]>(specs.map((s) => [s.mode, []]));
  const runRound = async (round: number, lines: readonly LineSpec[], planned: string) => {
    const order = round % 2 === 0 ? lines : [...lines].reverse();
    for (const spec of order) {
      const sample = await spec.run(round);
      samples.get(spec.mode)!.push(sample);
      console.log(
        `    [${suite}] round ${round + 1}/${planned} ${spec.mode}: ${Math.round(sample.perSecond).toLocaleString('en-US')} msg/s, p50/p99 ${sample.p50Ms.toFixed(1)}/${sample.p99Ms.toFixed(1)} ms`,
      );
    }
  };
  for (let round = 0; round < rounds; round++) await runRound(round, specs, String(rounds));
  // Extra rounds for a targeted or limit ratio that is not yet known to BENCH_PRECISION: only that
  // line and its baseline run (each once a round, in lockstep, so their rounds stay paired).
  const maxRounds = benchMaxRounds(rounds);
  const rateOf = (mode: string) => samples.get(mode)!.map((s) => s.perSecond);
  const imprecise = () =>
    specs.filter(
      (s) =>
        (s.target?.ratio !== undefined || s.limit === true) &&
        s.baseline !== undefined &&
        samples.has(s.baseline) &&
        !ratioKnown(rateOf(s.mode), rateOf(s.baseline)),
    );
  for (let round = rounds, open = imprecise(); open.length > 0 && round < maxRounds; round++, open = imprecise()) {
    const baselines = new Set(open.map((s) => s.baseline));
    await runRound(
      round,
      specs.filter((s) => open.includes(s) || baselines.has(s.mode)),
      `${maxRounds} (extra round: a target or limit ratio not yet known to ±${Math.round(benchPrecision() * 100)}%)`,
    );
  }
  for (const spec of specs) {
    const runs = samples.get(spec.mode)!;
    const rates = runs.map((r) => r.perSecond);
    const median = stats(rates).median;
    // The round closest to the median throughput supplies the latency figures.
    const typical = [...runs].sort((a, b) => Math.abs(a.perSecond - median) - Math.abs(b.perSecond - median))[0]!;
    const cpu = runs.flatMap((r) => (r.cpuUs === undefined ? [] : [r.cpuUs]));
    report({
      suite,
      mode: spec.mode,
      messages: spec.messages,
      rounds: rates,
      p50Ms: typical.p50Ms,
      p99Ms: typical.p99Ms,
      ...(cpu.length === 0 ? {} : { cpuUsPerMessage: stats(cpu).median }),
      ...(spec.baseline === undefined ? {} : { baseline: spec.baseline }),
      ...(spec.target === undefined ? {} : { target: spec.target }),
      ...(spec.note === undefined ? {} : { note: spec.note }),
    });
  }
}
