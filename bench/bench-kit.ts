/**
 * Measuring and reporting helpers shared by the benchmark suites.
 *
 * A suite measures inboxed next to the same work without it, in paired rounds (`pairedRounds`:
 * A then B, then B then A, ...), and hands each measured line to `report()`. `report()` prints the
 * line at once and keeps it; `run.ts` writes every kept line into bench/results/*.md after the
 * suites ran (`renderResults`). Sizes follow `BENCH_SCALE` (`scaled()`) and round counts
 * `BENCH_ROUNDS` (`benchRounds()`), so a development run can be small.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';

/**
 * All cores' CPU time so far, in clock ticks (Linux `/proc/stat`); undefined elsewhere. Steal (time
 * the hypervisor gave a neighbour while this VM wanted the core) and iowait are not busy: waiting
 * cannot end them.
 */
export function machineCpu(): { busy: number; steal: number; total: number } | undefined {
  try {
    // The first line: "cpu  user nice system idle iowait irq softirq steal ...".
    const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = fields;
    const busy = user + nice + system + irq + softirq;
    return { busy, steal, total: busy + idle + iowait + steal };
  } catch {
    return undefined;
  }
}

/** Latency percentiles and throughput of one measured run. */
export interface RunStats {
  messages: number;
  seconds: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** CPU time of this Node process (user + system) per task over the run, in µs. */
  cpuUs: number;
}

/** CPU time this Node process used (user + system) since `since`, in µs. */
export function cpuSince(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return used.user + used.system;
}

/** One measured line of a suite. */
export interface BenchLine {
  /** 'core' | 'amqp' | 'kafka' | 'sqs' | 'memory' */
  suite: string;
  /** What was measured, e.g. 'bare batch (same insert, no inbox)', '@inboxed/amqp batch'. Unique within the suite. */
  mode: string;
  /** Messages per round. */
  messages: number;
  /** msg/s of every round, in order. */
  rounds: number[];
  /** Per-message (or per-batch, say so in `mode`) latency of the median round. */
  p50Ms?: number;
  p99Ms?: number;
  /**
   * CPU time of the benchmark's Node process per message (user + system, median over the rounds),
   * in µs: everything on the Node side (inboxed, the driver, the broker client; an in-process
   * broker too, where the suite says so), none of the database's or an external broker's.
   */
  cpuUsPerMessage?: number;
  /**
   * Name (`mode`) of the line of the same suite this one is compared with; the table shows the
   * median and the range of the per-round paired ratios this/base.
   */
  baseline?: string;
  /** Target, e.g. `{ ratio: 0.8, text: '>= 0.80 of bare' }`; printed next to the ratio, with PASS/MISS. */
  target?: { ratio?: number; perSecond?: number; text: string };
  note?: string;
}

/** Summary of a line's rounds. */
export interface RoundStats {
  median: number;
  min: number;
  max: number;
  /** (max - min) / median, as a percentage. */
  spreadPct: number;
}

/** A line's comparison with its baseline and its target, as printed and written. */
export interface LineVerdict {
  /**
   * The median of the per-round ratios line[i] / baseline[i] (each round runs both back to back, so a
   * machine slowing down between rounds cancels out); undefined without a (reported) baseline.
   */
  ratio?: number;
  /** The per-round ratios line[i] / baseline[i]. */
  paired?: number[];
  /** PASS when every condition of the target holds; undefined without a target. */
  pass?: boolean;
  /** Why a target was missed or could not be checked. */
  detail?: string;
}

const lines: BenchLine[] = [];
const sections: { suite: string; markdown: string }[] = [];

/** The value at quantile `q` (0..1) of `samples` (sorted in place). */
export function percentile(samples: number[], q: number): number {
  if (samples.length === 0) return 0;
  samples.sort((a, b) => a - b);
  return samples[Math.min(samples.length - 1, Math.floor(q * samples.length))]!;
}

/** Median (mean of the two middle values for an even count), min, max and spread of `rounds`. */
export function stats(rounds: number[]): RoundStats {
  if (rounds.length === 0) return { median: 0, min: 0, max: 0, spreadPct: 0 };
  const sorted = [...rounds].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const median = sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  const min = sorted[0]!;
  const max = sorted[sorted.length - 1]!;
  return { median, min, max, spreadPct: median > 0 ? ((max - min) / median) * 100 : 0 };
}

/** The per-round ratios a[i] / b[i] (as many as the shorter of the two has rounds). */
export function pairedRatios(a: number[], b: number[]): number[] {
  const n = Math.min(a.length, b.length);
  return Array.from({ length: n }, (_, i) => (b[i]! > 0 ? a[i]! / b[i]! : 0));
}

/**
 * How precisely the median of `values` is known: the half-width of its 95% bootstrap interval,
 * relative to the median (0.05: the median is known to +-5%). Two runs whose medians are each known
 * to +-5% agree within about 10%. The resampling is seeded, so the same rounds always give the same
 * figure. Infinite below 3 values.
 */
export function medianPrecision(values: readonly number[]): number {
  const n = values.length;
  const median = stats([...values]).median;
  if (n < 3 || median <= 0) return Number.POSITIVE_INFINITY;
  const random = seededRandom(n);
  const resamples = 2000;
  const medians = Array.from({ length: resamples }, () => stats(Array.from({ length: n }, () => values[Math.floor(random() * n)]!)).median).sort(
    (x, y) => x - y,
  );
  const low = medians[Math.floor(0.025 * resamples)]!;
  const high = medians[Math.ceil(0.975 * resamples) - 1]!;
  return (high - low) / 2 / median;
}

/** mulberry32: a small, fast PRNG, so the bootstrap needs no dependency and repeats exactly. */
function seededRandom(seed: number): () => number {
  let state = seed | 0;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The precision a targeted ratio must reach before a suite stops adding rounds (see
 * `medianPrecision`): `BENCH_PRECISION` (a fraction; 0 turns the extra rounds off), default 0.05.
 */
export function benchPrecision(): number {
  const precision = Number(process.env.BENCH_PRECISION ?? 0.05);
  return Number.isFinite(precision) && precision >= 0 ? precision : 0.05;
}

/**
 * Whether the ratio of `lineRates` to `baseRates` (paired by round) is known well enough to stop
 * adding rounds: its median to `BENCH_PRECISION`, or always when that is 0 (extra rounds off).
 */
export function ratioKnown(lineRates: number[], baseRates: number[]): boolean {
  const precision = benchPrecision();
  return precision === 0 || medianPrecision(pairedRatios(lineRates, baseRates)) <= precision;
}

/**
 * How many rounds a suite may run in all, extra rounds included: `BENCH_MAX_ROUNDS`, else three
 * times its planned rounds. A noisy machine then costs a longer run, not a vaguer ratio, up to this cap.
 */
export function benchMaxRounds(plannedRounds: number): number {
  const rounds = Number(process.env.BENCH_MAX_ROUNDS);
  return Number.isInteger(rounds) && rounds >= plannedRounds ? rounds : 3 * plannedRounds;
}

/**
 * Runs `rounds` paired rounds of `a` and `b`, alternating which goes first (a b, b a, a b, ...),
 * so drift on a shared machine (a neighbour's job starting, a checkpoint) hurts both sides alike.
 * With `until`, keeps adding rounds (up to `maxRounds`) until `until(as, bs)` holds, e.g. until a
 * ratio is known precisely enough. Returns the results of each side in round order.
 */
export async function pairedRounds<A, B>(
  rounds: number,
  a: (round: number) => Promise<A>,
  b: (round: number) => Promise<B>,
  more?: { until: (as: A[], bs: B[]) => boolean; maxRounds: number },
): Promise<{ a: A[]; b: B[] }> {
  const as: A[] = [];
  const bs: B[] = [];
  for (let round = 0; round < rounds || (more !== undefined && round < more.maxRounds && !more.until(as, bs)); round++) {
    if (round % 2 === 0) {
      as.push(await a(round));
      bs.push(await b(round));
    } else {
      bs.push(await b(round));
      as.push(await a(round));
    }
  }
  return { a: as, b: bs };
}

/** `BENCH_SCALE`, a multiplier for message counts (default 1; e.g. 0.1 for a development run). */
export function benchScale(): number {
  const scale = Number(process.env.BENCH_SCALE ?? 1);
  return Number.isFinite(scale) && scale > 0 ? scale : 1;
}

/** `n` times `BENCH_SCALE`, rounded, at least `min`. */
export function scaled(n: number, min = 1): number {
  return Math.max(min, Math.round(n * benchScale()));
}

/** `BENCH_ROUNDS` when set (at least 1), else `defaultRounds`. */
export function benchRounds(defaultRounds: number): number {
  const rounds = Number(process.env.BENCH_ROUNDS);
  return Number.isInteger(rounds) && rounds >= 1 ? rounds : defaultRounds;
}

/** The run that had the median throughput among `runs` (the lower middle one for an even count). */
export function medianRun<T extends { perSecond: number }>(runs: T[]): T {
  const sorted = [...runs].sort((x, y) => x.perSecond - y.perSecond);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

/**
 * Runs `task(i)` for i in [0, total) with `concurrency` workers and measures throughput and
 * per-call latency.
 */
export async function measure(total: number, concurrency: number, task: (i: number) => Promise<void>): Promise<RunStats> {
  const latencies: number[] = [];
  let next = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < total; i = next++) {
        const t0 = performance.now();
        await task(i);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const cpuUs = cpuSince(cpu) / total;
  return { messages: total, seconds, perSecond: total / seconds, p50Ms: percentile(latencies, 0.5), p99Ms: percentile(latencies, 0.99), cpuUs };
}

/** Formats a number of messages per second. */
export function rate(perSecond: number): string {
  return `${Math.round(perSecond).toLocaleString('en-US')} msg/s`;
}

/** Prints rows as an aligned table. */
export function printTable(title: string, header: string[], rows: (string | number)[][]): void {
  const all = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, c) => Math.max(...all.map((r) => String(r[c] ?? '').length)));
  console.log(`\n${title}`);
  for (const [i, row] of all.entries()) {
    console.log(`  ${row.map((cell, c) => String(cell).padEnd(widths[c]!)).join('  ')}`);
    if (i === 0) console.log(`  ${widths.map((w) => '-'.repeat(w)).join('  ')}`);
  }
}

/** The database the benchmarks write to: `DATABASE_URL`, default the local test database. */
export function benchDatabaseUrl(): string {
  return process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
}

/**
 * A connection pool for a suite's lines. It keeps idle connections: node-postgres closes them after
 * 10 s by default, so a line that followed a pre-fill, a settle or a line without a database would
 * start on new backends with cold caches, and its neighbour in the pair on warm ones.
 */
export function benchPool(max: number): pg.Pool {
  return new pg.Pool({ connectionString: benchDatabaseUrl(), max, idleTimeoutMillis: 0 });
}

/** Compares `line` with its baseline (looked up among the lines reported so far) and its target. */
export function verdict(line: BenchLine, reported: readonly BenchLine[] = lines): LineVerdict {
  const result: LineVerdict = {};
  const median = stats(line.rounds).median;
  if (line.baseline !== undefined) {
    const base = reported.find((l) => l.suite === line.suite && l.mode === line.baseline);
    if (base) {
      result.paired = pairedRatios(line.rounds, base.rounds);
      result.ratio = stats(result.paired).median;
    }
  }
  if (line.target) {
    const misses: string[] = [];
    if (line.target.ratio !== undefined) {
      if (result.ratio === undefined) misses.push(`no baseline '${line.baseline ?? ''}' to compare with`);
      else if (result.ratio < line.target.ratio) misses.push(`ratio ${result.ratio.toFixed(2)} < ${line.target.ratio.toFixed(2)}`);
    }
    if (line.target.perSecond !== undefined && median < line.target.perSecond) misses.push(`${grouped(median)} < ${grouped(line.target.perSecond)} msg/s`);
    result.pass = misses.length === 0;
    if (misses.length > 0) result.detail = misses.join('; ');
  }
  return result;
}

/** Keeps `line` for the results file and prints it at once. */
export function report(line: BenchLine): void {
  lines.push(line);
  const s = stats(line.rounds);
  const v = verdict(line);
  const parts = [
    `${rate(s.median)} median of ${line.rounds.length} round${line.rounds.length === 1 ? '' : 's'} x ${grouped(line.messages)} msgs`,
    `(${grouped(s.min)}-${grouped(s.max)}, spread ${s.spreadPct.toFixed(0)}%)`,
  ];
  if (line.p50Ms !== undefined || line.p99Ms !== undefined) parts.push(`p50/p99 ${ms(line.p50Ms)}/${ms(line.p99Ms)} ms`);
  if (line.cpuUsPerMessage !== undefined) parts.push(`Node CPU ${line.cpuUsPerMessage.toFixed(1)} µs/msg`);
  if (v.ratio !== undefined) parts.push(`ratio ${ratioText(v)} vs '${line.baseline}'`);
  else if (line.baseline !== undefined) parts.push(`(baseline '${line.baseline}' not reported yet)`);
  if (line.target) parts.push(`target ${line.target.text}: ${v.pass ? 'PASS' : `MISS${v.detail ? ` (${v.detail})` : ''}`}`);
  if (line.note) parts.push(`-- ${line.note}`);
  console.log(`  [${line.suite}] ${line.mode}: ${parts.join(', ')}`);
}

/**
 * Adds free markdown (a paragraph, a list, a table) to `suite`'s part of the results file, after
 * its table; for what does not fit a line, such as the memory suite's samples and verdict.
 */
export function reportSection(suite: string, markdown: string): void {
  sections.push({ suite, markdown });
}

/** Every line reported so far, in order. */
export function reportedLines(): readonly BenchLine[] {
  return lines;
}

/** One markdown part per suite (in `order`, then any other suite in first-reported order). */
export function renderResults(order: readonly string[]): string {
  const suites = [...new Set([...order, ...lines.map((l) => l.suite), ...sections.map((s) => s.suite)])].filter(
    (suite) => lines.some((l) => l.suite === suite) || sections.some((s) => s.suite === suite),
  );
  const out: string[] = [];
  for (const suite of suites) {
    out.push(`## ${suite}`, '');
    const own = lines.filter((l) => l.suite === suite);
    if (own.length > 0) {
      out.push(
        '| mode | messages/round | rounds | median msg/s | min-max msg/s (spread) | p50 / p99 ms | Node CPU µs/msg | ratio ±95% interval vs baseline (paired range) | target | result |',
        '|---|--:|--:|--:|--:|--:|--:|---|---|---|',
      );
      for (const line of own) {
        const s = stats(line.rounds);
        const v = verdict(line, own);
        const latency = line.p50Ms === undefined && line.p99Ms === undefined ? '' : `${ms(line.p50Ms)} / ${ms(line.p99Ms)}`;
        const ratio = v.ratio === undefined ? '' : `${ratioText(v)} vs ${escapeCell(line.baseline ?? '')}`;
        const result = line.target === undefined ? '' : v.pass ? 'PASS' : `**MISS**${v.detail ? ` (${escapeCell(v.detail)})` : ''}`;
        out.push(
          `| ${escapeCell(line.mode)} | ${grouped(line.messages)} | ${line.rounds.length} | ${grouped(s.median)} | ${grouped(s.min)}-${grouped(s.max)} (${s.spreadPct.toFixed(0)}%) | ${latency} | ${line.cpuUsPerMessage === undefined ? '' : line.cpuUsPerMessage.toFixed(1)} | ${ratio} | ${escapeCell(line.target?.text ?? '')} | ${result} |`,
        );
      }
      const notes = own.filter((l) => l.note);
      if (notes.length > 0) out.push('', ...notes.map((l) => `- ${l.mode}: ${l.note}`));
      out.push('');
    }
    for (const section of sections.filter((s) => s.suite === suite)) out.push(section.markdown.trimEnd(), '');
  }
  return out.join('\n');
}

function ratioText(v: LineVerdict): string {
  if (v.paired === undefined || v.paired.length === 0) return (v.ratio ?? 0).toFixed(2);
  const { min, max } = stats(v.paired);
  const precision = medianPrecision(v.paired);
  const known = Number.isFinite(precision) ? ` ±${(precision * 100).toFixed(0)}%` : '';
  return `${(v.ratio ?? 0).toFixed(2)}${known} (${min.toFixed(2)}-${max.toFixed(2)})`;
}

function grouped(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

function ms(value: number | undefined): string {
  return value === undefined ? '-' : value < 10 ? value.toFixed(2) : value.toFixed(1);
}

function escapeCell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}
