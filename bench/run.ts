/**
 * `pnpm bench`: runs the suites in ./suites in a fixed order, then writes the results file. Each
 * suite measures inboxed next to the same work without it in the same run, in paired rounds, so
 * ratios are not skewed by a noisy machine's drift.
 *
 *   pnpm bench                 database, core, amqp, kafka, sqs -> bench/results/latest.md
 *                              (the run before it moves to previous.md)
 *   pnpm bench core kafka      only these             -> bench/results/partial.md (gitignored)
 *   pnpm bench memory          1M-message memory run  -> bench/results/memory.md
 *
 * Only a full run at full size (all default suites, none failed, no BENCH_* or *_BENCH_RECORDS
 * variable set) overwrites latest.md (and only `pnpm bench memory` at full size memory.md), so a
 * development run never replaces the committed results.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import pg from 'pg';
import { benchDatabaseUrl, machineCpu, renderResults } from './bench-kit.js';

const ORDER = ['database', 'core', 'amqp', 'kafka', 'sqs'];
const wanted = process.argv.slice(2);
const suites = wanted.length > 0 ? wanted : ORDER;
const started = new Date();
const cpuAtStart = machineCpu();
const failures: string[] = [];

for (const name of suites) {
  const file = new URL(`./suites/${name}.ts`, import.meta.url);
  if (!existsSync(file)) {
    console.log(`\n(${name}: no benchmark suite yet)`);
    failures.push(`${name}: no such suite`);
    continue;
  }
  const t0 = performance.now();
  try {
    const suite = (await import(file.href)) as { default: () => Promise<void> };
    await suite.default();
    console.log(`  (${name}: ${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  } catch (error) {
    console.error(`\n${name} suite failed:`, error);
    failures.push(`${name}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

const sizeOverrides = Object.entries(process.env).filter(([key]) => key.startsWith('BENCH_') || key.endsWith('_BENCH_RECORDS'));
const full = ORDER.every((s) => suites.includes(s)) && suites.every((s) => ORDER.includes(s)) && failures.length === 0 && sizeOverrides.length === 0;
/** `pnpm bench memory` alone, at full size, has a committed file of its own. */
const memoryRun = suites.length === 1 && suites[0] === 'memory' && failures.length === 0 && sizeOverrides.length === 0;
const fileName = full ? 'latest' : memoryRun ? 'memory' : 'partial';
const target = new URL(`./results/${fileName}.md`, import.meta.url);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
const minutes = (Date.now() - started.getTime()) / 60_000;
const steal = stolenShare();
const header = [
  `# inboxed benchmark results${full ? '' : memoryRun ? ' (memory run)' : ' (partial run)'}`,
  '',
  `\`pnpm bench${wanted.length > 0 ? ` ${wanted.join(' ')}` : ''}\`, started ${started.toISOString()}, took ${minutes.toFixed(1)} min.`,
  '',
  ...(await machine()).map((line) => `- ${line}`),
  ...(steal === undefined ? [] : [`- CPU steal during the run: ${steal}`]),
  ...(sizeOverrides.length > 0 ? [`- size overrides: ${sizeOverrides.map(([k, v]) => `${k}=${v}`).join(', ')}`] : []),
  ...(failures.length > 0 ? ['', ...failures.map((f) => `**Failed**: ${f}`)] : []),
  '',
  'Columns: *median msg/s* is the median over the rounds; *min-max (spread)* the slowest and fastest round and',
  '(max-min)/median; *p50 / p99* the latency of one message (one batch where the mode says so) in the median',
  "round; *Node CPU* the benchmark process's CPU time per message (median over the rounds); *ratio* is the",
  'median of the per-round paired ratios line/baseline (each round runs both lines back to back, alternating',
  'which goes first, so drift between rounds cancels), ± the half-width of its 95% bootstrap interval (two runs',
  'whose ratios are each known to ±5% agree within about 10%), and the range of the paired ratios. A line with a',
  "ratio target, or whose ratio is a limit a target is judged by (the database suite's floors and ceilings), gets",
  'extra rounds, run with its baseline alone, until its ratio is known to ±5% or its suite ran three times its',
  'planned rounds (`BENCH_PRECISION`, `BENCH_MAX_ROUNDS`); its *rounds* column counts them.',
  '*result* is PASS when every target holds.',
  'The packages are measured as built (`dist`), as an application runs them.',
  '',
].join('\n');
// The run before stays next to it as previous.md: two full runs side by side show how far the
// numbers move between runs on the same machine.
if (fileName === 'latest' && existsSync(target)) copyFileSync(target, new URL('./results/previous.md', import.meta.url));
writeFileSync(target, `${header}\n${renderResults(ORDER)}`);
// The repository's Biome checks markdown too: format the committed files as `biome check --write`
// would. (partial.md is git-ignored, so Biome skips it and would report an error.)
if (fileName !== 'partial') {
  await promisify(execFile)(fileURLToPath(new URL('../node_modules/.bin/biome', import.meta.url)), ['format', '--write', fileURLToPath(target)]).catch(
    (error: unknown) => console.error('could not format the results file with Biome:', error),
  );
}
console.log(`\nresults written to bench/results/${fileName}.md`);
process.exit(failures.length > 0 ? 1 : 0);

/**
 * How quiet the VM was: the share of all cores' time the hypervisor gave to someone else while this
 * VM wanted it (steal in `/proc/stat`), over the whole run. A quiet machine shows about 0; where it is
 * several percent, absolute rates drop and rounds spread, while the paired ratios hold better.
 */
function stolenShare(): string | undefined {
  const now = machineCpu();
  if (cpuAtStart === undefined || now === undefined || now.total <= cpuAtStart.total) return undefined;
  const share = (now.steal - cpuAtStart.steal) / (now.total - cpuAtStart.total);
  return `${(share * 100).toFixed(1)}% of all cores' time went to the hypervisor's other guests (about 0 on a quiet machine)`;
}

/** The machine the numbers come from: CPU, memory, Node, and each service's version. */
async function machine(): Promise<string[]> {
  const cpu = cpus();
  const out = [
    `CPU: ${cpu[0]?.model.trim() ?? 'unknown'} x ${cpu.length}; memory ${(totalmem() / 2 ** 30).toFixed(1)} GiB; Node ${process.version} (${process.platform} ${process.arch})`,
  ];
  out.push(
    `PostgreSQL: ${await attempt(async () => {
      const client = new pg.Client({ connectionString: benchDatabaseUrl() });
      await client.connect();
      try {
        const { rows } = await client.query<{ version: string }>('select version()');
        return `${rows[0]?.version ?? '?'} at ${new URL(benchDatabaseUrl()).host}`;
      } finally {
        await client.end();
      }
    })}`,
  );
  out.push(
    `RabbitMQ: ${await attempt(async () => {
      const url = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
      const connection = await amqp.connect(url);
      try {
        const properties = (connection.connection as unknown as { serverProperties?: Record<string, unknown> }).serverProperties ?? {};
        return `${String(properties.product ?? 'RabbitMQ')} ${String(properties.version ?? '?')} at ${new URL(url).host}`;
      } finally {
        await connection.close();
      }
    })}`,
  );
  out.push(
    `Kafka: ${
      process.env.KAFKA_BROKERS
        ? `KAFKA_BROKERS=${process.env.KAFKA_BROKERS}`
        : `librdkafka mock cluster (test/support/kafka-mock), librdkafka ${await attempt(async () => (await promisify(execFile)('pkg-config', ['--modversion', 'rdkafka'])).stdout.trim())}`
    }`,
  );
  out.push(
    `SQS: ${
      process.env.SQS_ENDPOINT
        ? `SQS_ENDPOINT=${process.env.SQS_ENDPOINT}`
        : `fauxqs ${await attempt(async () => (JSON.parse(readFileSync(new URL('./node_modules/fauxqs/package.json', import.meta.url), 'utf8')) as { version: string }).version)} (in process)`
    }`,
  );
  return out;
}

async function attempt(read: () => Promise<string>): Promise<string> {
  try {
    return await read();
  } catch (error) {
    return `unknown (${error instanceof Error ? error.message : String(error)})`;
  }
}
