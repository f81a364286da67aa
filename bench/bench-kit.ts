/** Small measuring helpers shared by the benchmark suites. */

/** Latency percentiles and throughput of one measured run. */
export interface RunStats {
  messages: number;
  seconds: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** The value at quantile `q` (0..1) of `samples` (sorted in place). */
export function percentile(samples: number[], q: number): number {
  if (samples.length === 0) return 0;
  samples.sort((a, b) => a - b);
  return samples[Math.min(samples.length - 1, Math.floor(q * samples.length))]!;
}

/**
 * Runs `task(i)` for i in [0, total) with `concurrency` workers and measures throughput and
 * per-call latency.
 */
export async function measure(total: number, concurrency: number, task: (i: number) => Promise<void>): Promise<RunStats> {
  const latencies: number[] = [];
  let next = 0;
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
  return { messages: total, seconds, perSecond: total / seconds, p50Ms: percentile(latencies, 0.5), p99Ms: percentile(latencies, 0.99) };
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
