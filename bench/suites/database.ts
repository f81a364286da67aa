/**
 * The database's own limit, without Node: pgbench runs the statements of one batch of 100
 * messages on the server, with two clients, so no driver, fingerprinting or SQL building is in the
 * numbers. The lines add one piece at a time to the bare work:
 * - bare: the set-based domain insert (the core suite's bare batch);
 * - minimal inbox: plus one row per message under a unique (consumer, message_id), the least any
 *   database-decided inbox writes;
 * - inboxed's claim: the inbox row as inboxed writes it (the real table from `migrate()`, with its
 *   columns and indexes, `ON CONFLICT DO NOTHING RETURNING`);
 * - a trivial statement in the check's place: the claim, then `select 1` sent with COMMIT where the
 *   check goes. The check is a statement because a statement is what makes a swallowed failure
 *   visible on every driver (COMMIT alone answers `ROLLBACK` without an error), so no check sent as a
 *   statement costs less than this line;
 * - inboxed's statements: the completion check it runs now, reading the claimed rows by tuple id.
 * The last batch line's ratio to bare is the most inboxed's batch mode can reach on this server,
 * whatever the Node side does; compare it with the core suite's withInboxBatch ratio. Four more
 * lines do the same for one message per transaction with eight clients: a bare one-row insert,
 * withInbox's claim without the completion check, the claim with the trivial statement, and
 * withInbox's statements; the last ratio is the ceiling of the core suite's withInbox c8. Every line
 * sends its statements in the round trips its code makes (BEGIN with the claim, the check with COMMIT).
 *
 * The four lines the limits are read from (the minimal inbox, the batch ceiling, the per-message
 * claim and the per-message ceiling) are marked `limit`: like a targeted ratio, each gets extra
 * rounds until it is known to ±5%, so two runs agree on the limits, not only on the targets.
 *
 * Needs `pgbench` (shipped with PostgreSQL's client tools) on PATH.
 * Env: BENCH_ROUNDS (default 5), BENCH_SCALE (seconds per run: 8 x scale, at least 2).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { migrate } from '@inboxed/core';
import { drizzle } from 'drizzle-orm/node-postgres';
import { benchDatabaseUrl, benchPool, benchRounds, benchScale, percentile, report, reportSection, stats } from '../bench-kit.js';
import { resetForLine, runLines, type Sample } from '../broker-harness.js';

const SCHEMA = `bench_database_${process.pid}`;
const BATCH = 100;
const CLIENTS = 2;
/** Clients of the per-message lines: the core suite's withInbox c8. */
const SINGLE_CLIENTS = 8;
const SECONDS = Math.max(2, Math.round(8 * benchScale()));
const ROUNDS = benchRounds(5);

/** The batch's ids, made on the server: a random base per transaction, so runs never collide. */
const IDS = `select 'm' || (:base::bigint * 1000 + g) as id from generate_series(1, ${BATCH}) g`;
const DOMAIN = `insert into "${SCHEMA}".effects (message_id, payload) select id, '{"amount":1,"currency":"EUR"}'::jsonb from (${IDS}) m;`;
const MINIMAL = `insert into "${SCHEMA}".minimal_inbox (consumer, message_id) select 'bench', id from (${IDS}) m on conflict do nothing returning message_id;`;
// What inboxed's claim writes: every column it sets, a 64-hex fingerprint, the real indexes.
const CLAIM = `insert into "${SCHEMA}".inbox (consumer, message_id, fingerprint, status, source, received_at)
  select 'bench', id, '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08', 'processed', null, now() from (${IDS}) m
  on conflict do nothing returning message_id;`;
// The claim as inboxed runs it, keeping what it returns (the ids and their tuple ids) for the check,
// which inboxed sends as literals.
const CLAIM_KEEPING = `with claimed as (${CLAIM.replace('returning message_id;', 'returning message_id, ctid')})
  select array_agg(message_id)::text as ids, array_agg(ctid)::text as tids from claimed \\gset`;
const PROBES = `(select count(*) from unnest(':ids'::text[]) m(id)
  cross join lateral (select 1 from "${SCHEMA}".inbox i where i.consumer = 'bench' and i.message_id = m.id limit 1) found)`;
/** In the check's place, a statement that does nothing but fail in an aborted transaction: what any check sent as a statement costs at least. */
const TRIVIAL = 'select 1;';
// inboxed's completion check (InboxStore.verifyText): the claimed rows read by tuple id, after the
// local setting that keeps PostgreSQL from reading the whole (young) table instead; the probes only if
// that misses (they never run here).
const SEQSCAN_OFF = "select set_config('enable_seqscan', 'off', true);";
const CHECK = `select case when txid_current_if_assigned() is not null and ((select count(*) from
  (select consumer, message_id from "${SCHEMA}".inbox where ctid = any(':tids'::tid[]) offset 0) here
  where here.consumer = 'bench' and here.message_id = any(':ids'::text[])) = ${BATCH} or ${PROBES} = ${BATCH}) then 0 else 1 / (random() * 0)::int end;`;

// One message per transaction, as withInbox sends it (InboxStore.claimText/verifyText for one row),
// next to the bare transaction doing the same one-row insert: the per-message modes' ceiling.
const SINGLE_ID = `'m' || :base`;
const SINGLE_DOMAIN = `insert into "${SCHEMA}".effects (message_id, payload) values (${SINGLE_ID}, '{"amount":1,"currency":"EUR"}'::jsonb);`;
const SINGLE_CLAIM = `insert into "${SCHEMA}".inbox (consumer, message_id, fingerprint, status, source, received_at)
  values ('bench', ${SINGLE_ID}, '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08', 'processed', null, now())
  on conflict do nothing returning message_id \\gset`;
const SINGLE_CHECK = `select case when txid_current_if_assigned() is not null and count(*) = 1 then 0 else 1 / (random() * 0)::int end
  from "${SCHEMA}".inbox where consumer = 'bench' and message_id = ':message_id';`;

/**
 * A pgbench script of one transaction, each inner list one round trip: its statements sent as one
 * simple-protocol query (pgbench's `\;`), as inboxed sends BEGIN with the claim and the check with
 * COMMIT, so every line pays for exactly the round trips its code makes.
 */
const transaction = (...roundTrips: string[][]) =>
  ['\\set base random(1, 1000000000000000)', ...roundTrips.map((statements) => compound(statements)), ''].join('\n');
/** Statements (each ending in `;` or `\gset`) as one query: all but the last end in `\;` instead. */
const compound = (statements: string[]) =>
  statements.map((statement, i) => (i < statements.length - 1 ? statement.replace(/;\s*$/, ' \\;') : statement)).join('\n');

export default async function run(): Promise<void> {
  const pool = benchPool(2);
  const dir = mkdtempSync(path.join(tmpdir(), 'inboxed-pgbench-'));
  try {
    await pool.query(`create schema "${SCHEMA}"`);
    await pool.query(`create table "${SCHEMA}".effects (id bigserial primary key, message_id text not null, payload jsonb)`);
    await pool.query(`create table "${SCHEMA}".minimal_inbox (consumer text not null, message_id text not null, primary key (consumer, message_id))`);
    await migrate(drizzle(pool), { schema: SCHEMA });

    /** Per line, per round: each SQL statement's average latency (pgbench -r), in ms. */
    const statementTimes = new Map<string, { statement: string; ms: number }[][]>();
    /** One pgbench run of `statements`, from empty tables on a settled machine (see `resetForLine`), like the core suite. */
    const pgbench =
      (name: string, text: string, { clients = CLIENTS, batch = BATCH } = {}) =>
      async (round: number): Promise<Sample> => {
        await resetForLine(pool, [`"${SCHEMA}".effects`, `"${SCHEMA}".minimal_inbox`, `"${SCHEMA}".inbox`]);
        const file = path.join(dir, `${name}.sql`);
        writeFileSync(file, text);
        const prefix = path.join(dir, `${name}-${round}`);
        const args = [
          '-n',
          '-c',
          String(clients),
          '-j',
          String(Math.min(clients, 2)),
          '-T',
          String(SECONDS),
          '-f',
          file,
          '-l',
          `--log-prefix=${prefix}`,
          '-r',
          benchDatabaseUrl(),
        ];
        let stdout: string;
        try {
          ({ stdout } = await promisify(execFile)('pgbench', args, { cwd: dir }));
        } catch (error) {
          throw new Error(`pgbench failed (it ships with PostgreSQL's client tools and must be on PATH): ${String(error)}`, { cause: error });
        }
        const tps = Number(/tps = ([\d.]+)/.exec(stdout)?.[1]);
        if (!Number.isFinite(tps)) throw new Error(`pgbench printed no tps:\n${stdout}`);
        statementTimes.set(name, [...(statementTimes.get(name) ?? []), statementLatencies(stdout)]);
        // The per-transaction log: "client transaction latency_us script epoch us" per line.
        const latencies = readdirSync(dir)
          .filter((f) => f.startsWith(path.basename(prefix)))
          .flatMap((f) => readFileSync(path.join(dir, f), 'utf8').trim().split('\n'))
          .map((line) => Number(line.split(' ')[2]) / 1000);
        return {
          perSecond: tps * batch,
          seconds: SECONDS,
          p50Ms: percentile(latencies, 0.5),
          p99Ms: percentile(latencies, 0.99),
          settled: Math.round(tps * batch * SECONDS),
        };
      };

    const bare = 'bare: the set-based domain insert';
    const bareSingle = 'bare per-message: one-row insert, 1 message per transaction';
    const single = { clients: SINGLE_CLIENTS, batch: 1 };
    const singleNote = `pgbench, ${SINGLE_CLIENTS} clients (the core suite's c8), 1 message per transaction, runs of ${SECONDS} s; no Node in the numbers`;
    const note = `pgbench, ${CLIENTS} clients, ${BATCH} messages per transaction (the messages/round column), runs of ${SECONDS} s; p50/p99 per transaction; no Node in the numbers`;
    await runLines(
      'database',
      ROUNDS,
      [
        { mode: bare, messages: BATCH, note, run: pgbench('bare', transaction(['begin;'], [DOMAIN], ['commit;'])) },
        {
          mode: 'minimal inbox: + one unique-key row per message',
          limit: true,
          messages: BATCH,
          baseline: bare,
          note,
          run: pgbench('minimal', transaction(['begin;'], [MINIMAL], [DOMAIN], ['commit;'])),
        },
        {
          mode: "inboxed's claim: + the inbox row as inboxed writes it",
          messages: BATCH,
          baseline: bare,
          note,
          run: pgbench('claim', transaction(['begin;', CLAIM], [DOMAIN], ['commit;'])),
        },
        {
          mode: "a trivial statement in the check's place: the claim, and `select 1` with COMMIT",
          messages: BATCH,
          baseline: bare,
          note,
          run: pgbench('trivial', transaction(['begin;', CLAIM_KEEPING], [DOMAIN], [TRIVIAL, 'commit;'])),
        },
        {
          mode: "inboxed's statements: + the completion check by tuple id (its ceiling)",
          limit: true,
          messages: BATCH,
          baseline: bare,
          note,
          run: pgbench('check', transaction(['begin;', CLAIM_KEEPING], [DOMAIN], [SEQSCAN_OFF, CHECK, 'commit;'])),
        },
        { mode: bareSingle, messages: 1, note: singleNote, run: pgbench('bare-single', transaction(['begin;'], [SINGLE_DOMAIN], ['commit;']), single) },
        {
          mode: "inboxed's per-message claim: claim, insert, no completion check",
          limit: true,
          messages: 1,
          baseline: bareSingle,
          note: singleNote,
          run: pgbench('claim-single', transaction(['begin;', SINGLE_CLAIM], [SINGLE_DOMAIN], ['commit;']), single),
        },
        {
          mode: "a trivial statement in the per-message check's place: claim, insert, `select 1` with COMMIT",
          messages: 1,
          baseline: bareSingle,
          note: singleNote,
          run: pgbench('trivial-single', transaction(['begin;', SINGLE_CLAIM], [SINGLE_DOMAIN], [TRIVIAL, 'commit;']), single),
        },
        {
          mode: "inboxed's per-message statements: claim, insert, completion check",
          limit: true,
          messages: 1,
          baseline: bareSingle,
          note: singleNote,
          run: pgbench('check-single', transaction(['begin;', SINGLE_CLAIM], [SINGLE_DOMAIN], [SINGLE_CHECK, 'commit;']), single),
        },
      ],
      report,
    );
    reportSection('database', statementSection(statementTimes));
  } finally {
    await pool.query(`drop schema if exists "${SCHEMA}" cascade`);
    await pool.end();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The SQL statements' average latencies from pgbench -r output ("statement latencies in milliseconds"). */
function statementLatencies(stdout: string): { statement: string; ms: number }[] {
  const section = stdout.split(/statement latencies in milliseconds.*\n/)[1] ?? '';
  return section
    .split('\n')
    .map((line) => /^\s+([\d.]+)\s+(?:\d+\s+)?(.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null && !m[2]!.startsWith('\\'))
    .map((m) => ({ statement: m[2]!.trim().replace(/\s+/g, ' ').slice(0, 70), ms: Number(m[1]) }));
}

/**
 * PostgreSQL's time per statement, per line: the median over the rounds of each statement's
 * average latency (pgbench -r; a statement waiting for a lock or for the other client's commit
 * counts that wait too). The check line's rows show where inboxed's statements spend the server's time.
 */
function statementSection(times: Map<string, { statement: string; ms: number }[][]>): string {
  const out = [
    'PostgreSQL time per statement (pgbench -r: average ms per transaction, median over the rounds). A round trip of several',
    'statements (`\\;`) is listed by its first: `begin ;` is BEGIN with the claim, the last line of a checked transaction is the check with COMMIT.',
    '',
  ];
  for (const [name, rounds] of times) {
    out.push(`- ${name}:`);
    for (const [index, { statement }] of (rounds[0] ?? []).entries()) {
      const median = stats(rounds.map((round) => round[index]?.ms ?? 0)).median;
      out.push(`  - ${median.toFixed(3)} ms \`${statement.replaceAll('`', "'")}\``);
    }
  }
  return out.join('\n');
}
