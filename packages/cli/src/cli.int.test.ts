import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, databaseUrl, type TestDatabase } from '@inboxed/test-support';
import { sql } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { run } from './program.js';

// The CLI as users run it (a child process: exit codes, stdout/stderr, --json), and in-process through
// run() where a spawn (~1 s for node + tsx) would prove nothing more. Each test has its own schema.

const CLI = join(dirname(fileURLToPath(import.meta.url)), 'cli.ts');

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `inboxed <args>` in a child process, as a shell would. */
function spawnCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Result> {
  return new Promise((resolve, reject) => {
    const { DATABASE_URL: _ignored, ...parent } = process.env;
    const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', CLI, ...args], {
      env: { ...parent, NO_COLOR: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Runs the same program in-process. */
async function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Result> {
  let stdout = '';
  let stderr = '';
  const io = {
    stdout: (text: string) => {
      stdout += text;
    },
    stderr: (text: string) => {
      stderr += text;
    },
  };
  const code = await run(args, { io, env });
  return { code, stdout, stderr };
}

const json = (result: Result) => JSON.parse(result.stdout) as any;

describe('inboxed', () => {
  let t: TestDatabase;
  let db: string[];
  const q = (text: string) => t.query(text.replaceAll('$S', `"${t.schema}"`));
  const migrated = async () => expect((await runCli(['migrate', ...db])).code).toBe(0);
  const seed = async () => {
    await migrated();
    await q(`insert into $S.inbox (consumer, message_id, status, reason, completed_at, lease_expires_at, fencing_token) values
      ('billing', 'done', 'processed', null, now() - interval '10 days', null, 1),
      ('billing', 'refused', 'rejected', 'bad-card', now() - interval '1 hour', null, 1),
      ('billing', 'stuck', 'processing', null, now() - interval '20 minutes', now() + interval '1 hour', 3)`);
    await q(`insert into $S.inbox_attempts (consumer, message_id, attempts, last_error, last_error_code) values
      ('billing', 'stuck', 2, 'provider timeout', 'HANDLER_FAILED'),
      ('billing', 'done', 1, 'old failure', 'HANDLER_FAILED'),
      ('billing', 'poison', 4, 'boom', 'HANDLER_FAILED')`);
    await q(`insert into $S.inbox_dead_letters (consumer, message_id, reason, error_code, attempts, destination, dead_lettered_at) values
      ('billing', 'poison', 'max-attempts-exceeded', 'MAX_ATTEMPTS_EXCEEDED', 5, 'amqp:billing.dlq', now() - interval '30 minutes'),
      ('billing', 'ancient', 'permanent-failure', 'PERMANENT_FAILURE', 1, 'amqp:billing.dlq', now() - interval '3 days')`);
  };

  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { poolSize: 2, label: 'cli' });
    db = ['--database-url', databaseUrl(), '--schema', t.schema];
  });
  afterEach(async () => {
    await t?.close();
  });

  it('migrate --check exits 1 listing pending versions, migrate applies them, then --check exits 0', async () => {
    const before = await spawnCli(['migrate', '--check', '--json', ...db]);
    expect(before.code, before.stderr).toBe(1);
    const { pending } = json(before) as { pending: { version: number; name: string }[] };
    expect(json(before).upToDate).toBe(false);
    expect(pending.slice(0, 3)).toEqual([
      { version: 1, name: 'create_inbox' },
      { version: 2, name: 'leases_and_results' },
      { version: 3, name: 'dead_letters_and_audit' },
    ]);
    const human = await runCli(['migrate', '--check', ...db]);
    expect(human).toMatchObject({ code: 1, stdout: expect.stringContaining('0003_dead_letters_and_audit') });
    // Tables missing: every other command says so with its own exit code.
    const missing = await runCli(['status', ...db]);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toContain('[INBOX_TABLE_MISSING]');

    const applied = await runCli(['migrate', '--json', ...db]);
    expect(applied.code).toBe(0);
    expect(json(applied)).toEqual({ applied: pending.map((m) => m.version), version: pending.at(-1)!.version });
    const after = await spawnCli(['migrate', '--check', ...db]);
    expect(after.code, after.stderr).toBe(0);
    expect(after.stdout).toContain('Up to date');
    expect(await runCli(['migrate', ...db])).toMatchObject({ code: 0, stdout: expect.stringContaining('Up to date') });
  });

  it('migrate --check on tables made outside inboxed (drizzle-kit: no history table) checks the tables, never advising a second owner', async () => {
    await migrated();
    // What drizzle-kit leaves: the same four tables (the packed-package suite compares the DDL), no <table>_migrations.
    await q('drop table $S.inbox_migrations');
    const complete = await spawnCli(['migrate', '--check', ...db]);
    expect(complete.code, complete.stderr).toBe(0);
    expect(complete.stdout).toContain('Up to date, managed outside inboxed');
    expect(complete.stdout).toContain(`"${t.schema}"."inbox_migrations"`);
    expect(complete.stdout).toContain('do not run `inboxed migrate` on them');
    const completeJson = await runCli(['migrate', '--check', '--json', ...db]);
    expect(completeJson.code).toBe(0);
    expect(json(completeJson)).toEqual({ upToDate: true, managedOutsideInboxed: true, pending: [] });

    // Behind this version (a drizzle-kit migration generated before migration 3): exit 1, the problem named.
    await q('drop table $S.inbox_audit');
    const behind = await runCli(['migrate', '--check', ...db]);
    expect(behind.code).toBe(1);
    expect(behind.stdout).toContain('managed outside inboxed');
    expect(behind.stdout).toContain(`table "${t.schema}"."inbox_audit" does not exist`);
    expect(behind.stdout).toContain('drizzle-kit generate and migrate');
    expect(behind.stdout).not.toContain('Pending migrations (run `inboxed migrate`)');
    const behindJson = json(await runCli(['migrate', '--check', '--json', ...db]));
    expect(behindJson).toMatchObject({ upToDate: false, managedOutsideInboxed: true, problems: [`table "${t.schema}"."inbox_audit" does not exist`] });
    expect(behindJson.pending.map((m: { version: number }) => m.version).slice(0, 3)).toEqual([1, 2, 3]);
    // Nothing was created or recorded by the check.
    expect(await q(`select to_regclass('"${t.schema}"."inbox_migrations"') is null as none`)).toEqual([{ none: true }]);
  });

  it('status reports every consumer, as a table and as JSON; an unknown consumer exits 5', async () => {
    await seed();
    const spawned = await spawnCli(['status', '--json', '--consumer', 'billing', ...db]);
    expect(spawned.code, spawned.stderr).toBe(0);
    const [billing] = json(spawned).consumers;
    expect(billing).toMatchObject({ consumer: 'billing', counts: { processed: 1, rejected: 1, processing: 1 }, failingCount: 3, deadLetters: 2 });
    expect(billing.oldestProcessingAgeMs).toBeGreaterThanOrEqual(20 * 60_000 - 5_000);
    expect(billing.oldestCompletedAgeMs).toBeGreaterThanOrEqual(10 * 86_400_000 - 60_000);
    expect(billing.failing.map((f: any) => f.messageId).sort()).toEqual(['done', 'poison', 'stuck']);

    const table = await runCli(['status', ...db]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^CONSUMER\s+PROCESSED\s+REJECTED\s+PROCESSING\s+OLDEST CLAIM\s+FAILING\s+DEAD-LETTERS\s+OLDEST COMPLETED\n/);
    expect(table.stdout).toMatch(/billing\s+1\s+1\s+1\s+20m \d+s\s+3\s+2\s+10d 0h/);
    expect(table.stdout).toContain('Failing messages of billing:');

    const unknown = await runCli(['status', '--consumer', 'bililng', '--json', ...db]);
    expect(unknown.code).toBe(5);
    expect(json(unknown)).toMatchObject({ error: { code: 'UNKNOWN_CONSUMER', exitCode: 5 } });
    expect(unknown.stderr).toContain('[UNKNOWN_CONSUMER]');
  });

  it('inspect shows the inbox row, attempts, dead-letters and repairs; unknown messages exit 5', async () => {
    await seed();
    const spawned = await spawnCli(['inspect', 'billing', 'poison', '--json', ...db]);
    expect(spawned.code, spawned.stderr).toBe(0);
    expect(json(spawned)).toMatchObject({
      consumer: 'billing',
      messageId: 'poison',
      inbox: null,
      attempts: { attempts: 4, lastErrorCode: 'HANDLER_FAILED' },
      deadLetters: [{ reason: 'max-attempts-exceeded', destination: 'amqp:billing.dlq', attempts: 5 }],
      audit: [],
    });
    const human = await runCli(['inspect', 'billing', 'stuck', ...db]);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/status:\s+processing/);
    expect(human.stdout).toMatch(/fencing token:\s+3/);
    expect(human.stdout).toMatch(/last error code:\s+HANDLER_FAILED/);
    expect(human.stdout).toMatch(/lease expires:\s+\S+ \(\d+m \d+s left\)/);
    expect(await runCli(['inspect', 'billing', 'nope', ...db])).toMatchObject({ code: 5, stderr: expect.stringContaining('[MESSAGE_NOT_FOUND]') });
    expect(await runCli(['inspect', 'nobody', 'nope', ...db])).toMatchObject({ code: 5, stderr: expect.stringContaining('[UNKNOWN_CONSUMER]') });
  });

  it('release frees a stuck claim (token + 1, lease given back) and clears its attempts, audited with the actor, reason and rows before/after', async () => {
    await seed();
    const released = await spawnCli(['release', 'billing', 'stuck', '--reason', 'worker host died', '--actor', 'ops-alice', '--json', ...db]);
    expect(released.code, released.stderr).toBe(0);
    expect(json(released)).toMatchObject({ action: 'release', messageId: 'stuck', audit: { actor: 'ops-alice', reason: 'worker host died' } });
    expect(await q(`select status, fencing_token, lease_expires_at is null as given_back from $S.inbox where message_id = 'stuck'`)).toEqual([
      { status: 'processing', fencing_token: 4, given_back: true },
    ]);
    expect(await q(`select 1 from $S.inbox_attempts where message_id = 'stuck'`)).toEqual([]);
    const [audit] = (await q(`select actor, action, consumer, message_id, reason, before, after from $S.inbox_audit`)) as any[];
    expect(audit).toMatchObject({ actor: 'ops-alice', action: 'release', consumer: 'billing', message_id: 'stuck', reason: 'worker host died' });
    expect(audit.before).toMatchObject({ inbox: { status: 'processing', fencing_token: 3 }, attempts: { attempts: 2, last_error_code: 'HANDLER_FAILED' } });
    expect(audit.after).toMatchObject({ inbox: { status: 'processing', fencing_token: 4 }, attempts: null });
    expect(audit.after.inbox.lease_expires_at).toBeNull();
    expect(audit.before.inbox.lease_expires_at).not.toBeNull();

    // The human form, and the release shows up in inspect's repairs.
    const inspected = await runCli(['inspect', 'billing', 'stuck', ...db]);
    expect(inspected.stdout).toMatch(/release\s+ops-alice\s+worker host died/);
    // Nothing left to release now: refused, exit 5.
    expect(await runCli(['release', 'billing', 'stuck', '--reason', 'again', ...db])).toMatchObject({
      code: 5,
      stderr: expect.stringContaining('[NOTHING_TO_RELEASE]'),
    });
    // --reason is required.
    expect(await runCli(['release', 'billing', 'stuck', ...db])).toMatchObject({ code: 2, stderr: expect.stringContaining('--reason') });
  });

  it('release refuses a processed row: exit 5, row and attempts unchanged, no audit row', async () => {
    await seed();
    const before = await q(`select * from $S.inbox where message_id = 'done'`);
    const refused = await spawnCli(['release', 'billing', 'done', '--reason', 'looks stuck', '--json', ...db]);
    expect(refused.code).toBe(5);
    expect(refused.stderr).toContain('[ALREADY_COMPLETED]');
    expect(json(refused)).toMatchObject({ error: { code: 'ALREADY_COMPLETED', exitCode: 5 } });
    expect(await q(`select * from $S.inbox where message_id = 'done'`)).toEqual(before);
    expect(await q(`select attempts from $S.inbox_attempts where message_id = 'done'`)).toEqual([{ attempts: 1 }]);
    expect(await q(`select count(*)::int as n from $S.inbox_audit`)).toEqual([{ n: 0 }]);
    expect(await runCli(['requeue', 'billing', 'refused', '--reason', 'retry', ...db])).toMatchObject({
      code: 5,
      stderr: expect.stringContaining('[ALREADY_COMPLETED]'),
    });
  });

  it('dead-letters lists records newest first, filtered by consumer, --since and --limit', async () => {
    await seed();
    const recent = await spawnCli(['dead-letters', '--since', '2h', '--json', ...db]);
    expect(recent.code, recent.stderr).toBe(0);
    expect(json(recent).deadLetters.map((d: any) => d.messageId)).toEqual(['poison']);
    const all = await runCli(['dead-letters', '--consumer', 'billing', '--json', ...db]);
    expect(json(all).deadLetters.map((d: any) => d.messageId)).toEqual(['poison', 'ancient']);
    const since = new Date(Date.now() - 5 * 86_400_000).toISOString();
    const table = await runCli(['dead-letters', '--since', since, '--limit', '1', ...db]);
    expect(table.code).toBe(0);
    expect(table.stdout.trim().split('\n')).toHaveLength(2);
    expect(table.stdout).toMatch(/billing\s+poison\s+max-attempts-exceeded\s+MAX_ATTEMPTS_EXCEEDED\s+5\s+amqp:billing.dlq/);
    expect(await runCli(['dead-letters', '--since', 'yesterday', ...db])).toMatchObject({ code: 2, stderr: expect.stringContaining('[USAGE_ERROR]') });
    expect(await runCli(['dead-letters', '--limit', '0', ...db])).toMatchObject({ code: 2 });
    expect(await runCli(['dead-letters', '--consumer', 'nobody', ...db])).toMatchObject({ code: 5 });
  });

  it('requeue clears the attempts record of a dead-lettered message, audited; a fresh budget is refused', async () => {
    await seed();
    const requeued = await spawnCli(['requeue', 'billing', 'poison', '--reason', 'fixed the parser', '--actor', 'bob', '--json', ...db]);
    expect(requeued.code, requeued.stderr).toBe(0);
    expect(json(requeued)).toMatchObject({ action: 'requeue', before: { attempts: { attempts: 4 } }, after: { inbox: null, attempts: null } });
    expect(await q(`select 1 from $S.inbox_attempts where message_id = 'poison'`)).toEqual([]);
    expect(await q(`select actor, action, message_id, reason, after from $S.inbox_audit`)).toEqual([
      { actor: 'bob', action: 'requeue', message_id: 'poison', reason: 'fixed the parser', after: { inbox: null, attempts: null } },
    ]);
    // The dead-letter record stays: it is history, not state.
    expect(await q(`select count(*)::int as n from $S.inbox_dead_letters where message_id = 'poison'`)).toEqual([{ n: 1 }]);
    expect(await runCli(['requeue', 'billing', 'poison', '--reason', 'again', ...db])).toMatchObject({
      code: 5,
      stderr: expect.stringContaining('[NOTHING_TO_REQUEUE]'),
    });
  });

  it('purge --dry-run counts and deletes nothing; the real run deletes with core’s purge and is audited', async () => {
    await seed();
    const dry = await spawnCli(['purge', '--older-than', '7d', '--dry-run', '--json', ...db]);
    expect(dry.code, dry.stderr).toBe(0);
    expect(json(dry)).toEqual({ dryRun: true, olderThanMs: 604_800_000, consumer: null, wouldDelete: { inbox: 1, attempts: 0 } });
    expect(await q(`select count(*)::int as n from $S.inbox`)).toEqual([{ n: 3 }]);
    expect(await q(`select count(*)::int as n from $S.inbox_audit`)).toEqual([{ n: 0 }]);

    const real = await runCli(['purge', '--older-than', '7d', '--consumer', 'billing', '--batch-size', '1', '--actor', 'cron', '--json', ...db]);
    expect(real.code, real.stderr).toBe(0);
    expect(json(real)).toMatchObject({ dryRun: false, deleted: 1, attemptsDeleted: 0, audit: { actor: 'cron', action: 'purge', consumer: 'billing' } });
    expect(await q(`select message_id from $S.inbox order by 1`)).toEqual([{ message_id: 'refused' }, { message_id: 'stuck' }]);
    expect(await q(`select actor, action, consumer, after from $S.inbox_audit`)).toEqual([
      { actor: 'cron', action: 'purge', consumer: 'billing', after: { deleted: 1, attemptsDeleted: 0, olderThanMs: 604_800_000, batchSize: 1 } },
    ]);
    for (const bad of ['7', '7 days', '1.5h', '0s', '-1d']) {
      expect(await runCli(['purge', '--older-than', bad, ...db]), bad).toMatchObject({ code: 2, stderr: expect.stringContaining('[USAGE_ERROR]') });
    }
    expect(await runCli(['purge', ...db])).toMatchObject({ code: 2, stderr: expect.stringContaining('--older-than') });
  });

  it('purge reports and audits the attempts records it deletes (retry budgets), not only inbox rows', async () => {
    await seed();
    await q(`update $S.inbox_attempts set last_attempt_at = now() - interval '9 days' where message_id in ('done', 'poison')`);
    const dry = await runCli(['purge', '--older-than', '7d', '--dry-run', ...db]);
    expect(dry.stdout).toContain('would delete 1 inbox row(s) and 2 attempts record(s) older than 7d');
    const text = await runCli(['purge', '--older-than', '7d', '--actor', 'cron', ...db]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^Deleted 1 inbox row\(s\) and 2 attempts record\(s\) older than 7d\. Audit #\d+ by cron\.\n$/);
    expect(await q(`select message_id from $S.inbox_attempts`)).toEqual([{ message_id: 'stuck' }]);
    await q(`update $S.inbox_attempts set last_attempt_at = now() - interval '9 days'`);
    const asJson = await runCli(['purge', '--older-than', '7d', '--json', ...db]);
    expect(json(asJson)).toMatchObject({ dryRun: false, deleted: 0, attemptsDeleted: 1 });
    expect(await q(`select after from $S.inbox_audit order by id`)).toEqual([
      { after: { deleted: 1, attemptsDeleted: 2, olderThanMs: 604_800_000, batchSize: 1000 } },
      { after: { deleted: 0, attemptsDeleted: 1, olderThanMs: 604_800_000, batchSize: 1000 } },
    ]);
  });

  it('durations over 100 years and dates outside 0001-9999 or not on the calendar are usage errors (exit 2), never failed statements', async () => {
    await seed();
    const cases = [
      ['purge', '--older-than', '100000000d', '--dry-run'],
      ['purge', '--older-than', '9007199254740991ms'],
      ['purge', '--older-than', '36526d'],
      ['dead-letters', '--since', '100000000d'],
      ['dead-letters', '--since', '0000-01-01'],
      ['dead-letters', '--since', '10000-01-01'],
      ['dead-letters', '--since', '2023-02-30'],
    ];
    for (const args of cases) {
      const result = await runCli([...args, '--json', ...db]);
      expect({ args, code: result.code }).toEqual({ args, code: 2 });
      expect(json(result)).toMatchObject({ error: { code: 'USAGE_ERROR', exitCode: 2 } });
    }
    expect(await q(`select count(*)::int as n from $S.inbox_audit`)).toEqual([{ n: 0 }]);
    // The bounds themselves work.
    const longest = await runCli(['purge', '--older-than', '36525d', '--dry-run', '--json', ...db]);
    expect(longest.code, longest.stderr).toBe(0);
    expect(json(longest)).toMatchObject({ olderThanMs: 3_155_760_000_000, wouldDelete: { inbox: 0, attempts: 0 } });
    for (const since of ['36525d', '0001-01-01', '9999-12-31T23:59:59Z', '2024-02-29']) {
      const result = await runCli(['dead-letters', '--since', since, '--json', ...db]);
      expect({ since, code: result.code, stderr: result.stderr }).toEqual({ since, code: 0, stderr: '' });
    }
  });

  it('prints stored text (ids, errors, destinations, consumer names) with its control characters escaped; --json keeps it exact', async () => {
    await migrated();
    const hostile = '\u001b[2J\u001b]0;pwned\u0007\r';
    const id = `order-1${hostile}\u0085\u202e`;
    const schema = sql.raw(`"${t.schema}"`);
    const consumer = `billing${hostile}`;
    await t.db.execute(sql`insert into ${schema}.inbox_dead_letters (consumer, message_id, reason, error_code, error, attempts, destination)
      values (${consumer}, ${id}, 'max-attempts-exceeded', 'MAX_ATTEMPTS_EXCEEDED', ${`invalid amount: ${hostile}`}, 5, ${`amqp:dlq${hostile}\nFAKE ROW`})`);
    await t.db.execute(sql`insert into ${schema}.inbox_attempts (consumer, message_id, attempts, last_error, last_error_code)
      values (${consumer}, ${id}, 3, ${`boom${hostile}\nspoof`}, 'HANDLER_FAILED')`);
    // C0 (newline only between lines), DEL, C1, U+2028/2029, bidi controls: none may reach the terminal.
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the characters the output must never hold.
    const unsafe = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
    const outputs = {
      status: await runCli(['status', ...db]),
      inspect: await runCli(['inspect', consumer, id, ...db]),
      deadLetters: await runCli(['dead-letters', ...db]),
    };
    for (const [name, output] of Object.entries(outputs)) {
      expect({ name, code: output.code, stderr: output.stderr }).toEqual({ name, code: 0, stderr: '' });
      expect({ name, raw: unsafe.test(output.stdout) }).toEqual({ name, raw: false });
      expect(output.stdout, name).toContain('\\x1b[2J\\x1b]0;pwned\\x07\\r');
    }
    expect(outputs.deadLetters.stdout.trim().split('\n')).toHaveLength(2);
    expect(outputs.deadLetters.stdout).toContain('amqp:dlq\\x1b[2J\\x1b]0;pwned\\x07\\r\\nFAKE ROW');
    expect(outputs.inspect.stdout).toMatch(/last error:\s+boom\\x1b\[2J\\x1b\]0;pwned\\x07\\r\\nspoof\n/);
    // An unknown consumer's name in an error message is escaped on stderr too.
    const unknown = await runCli(['inspect', `nobody${hostile}`, 'x', ...db]);
    expect(unknown.code).toBe(5);
    expect(unsafe.test(unknown.stderr)).toBe(false);
    // --json is the stored text, exactly (JSON escapes it).
    const asJson = await runCli(['dead-letters', '--json', ...db]);
    expect(json(asJson).deadLetters).toMatchObject([{ consumer, messageId: id, destination: `amqp:dlq${hostile}\nFAKE ROW` }]);
    expect(asJson.stdout).toBe(`${JSON.stringify(json(asJson), null, 2)}\n`);
  });

  it('a mistyped database URL option never prints its password, on stderr nor in --json', async () => {
    const secret = 'hunter2-s3cret';
    const url = `postgres://alice:${secret}@127.0.0.1:1/test`;
    const mistyped = [
      ['status', `--database_url=${url}`],
      ['status', '--json', `--databaseurl=${url}`],
      ['status', `--db=${url}`, '--json'],
      ['status', `--db=postgres://alice@127.0.0.1:1/test?sslmode=require&password=${secret}&sslpassword=${secret}`, '--json'],
      ['status', `--password=${secret}`, '--json'],
      ['status', `--db=postgres://alice:it's ${secret}@127.0.0.1:1/test`, '--json'],
      ['dead-letters', '--since', url, '--json'],
    ];
    for (const args of mistyped) {
      const result = await runCli(args);
      expect({ args, code: result.code }).toEqual({ args, code: 2 });
      expect(result.stderr).toContain('[USAGE_ERROR]');
      expect(result.stderr).toContain('***');
      expect(result.stderr + result.stdout).not.toContain(secret);
      if (args.includes('--json')) {
        expect(json(result).error).toMatchObject({ code: 'USAGE_ERROR', message: expect.stringContaining('***') });
        expect(json(result).error.message).not.toContain(secret);
      }
    }
    // A misspelled option with the URL as the next argument: commander names only the option.
    const apart = await runCli(['--databse-url', url, 'status', '--json']);
    expect(apart.code).toBe(2);
    expect(apart.stderr + apart.stdout).not.toContain(secret);
    // What is left of the message still says what was wrong.
    const typo = await runCli(['status', `--database_url=${url}`]);
    expect(typo.stderr).toContain("unknown option '--database_url=postgres://alice:***@127.0.0.1:1/test'");
    // As a user runs it.
    const spawned = await spawnCli(['status', '--json', `--databaseurl=${url}`]);
    expect(spawned.code).toBe(2);
    expect(spawned.stderr + spawned.stdout).not.toContain(secret);
    expect(json(spawned).error.message).toContain('postgres://alice:***@127.0.0.1:1/test');
  });

  it('accepts the URLs node-postgres accepts: user info before an empty host, the host and port as query parameters', async () => {
    await migrated();
    const server = new URL(databaseUrl());
    const userInfo = server.password === '' ? server.username : `${server.username}:${server.password}`;
    const queryHost = `postgres://${userInfo}@${server.pathname}?host=${server.hostname}&port=${server.port || '5432'}`;
    const result = await spawnCli(['status', '--json', '--database-url', queryHost, '--schema', t.schema]);
    expect(result.code, result.stderr).toBe(0);
    expect(json(result)).toEqual({ consumers: [] });
  });

  it('says clearly when there is no database URL, a bad one, or no server behind it', async () => {
    const none = await spawnCli(['status']);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('[DATABASE_URL_MISSING]');
    expect(await runCli(['status', '--database-url', 'mysql://x@y/z'])).toMatchObject({ code: 3, stderr: expect.stringContaining('[DATABASE_URL_INVALID]') });
    expect(await runCli(['status', '--database-url', 'not a url'])).toMatchObject({ code: 3, stderr: expect.stringContaining('[DATABASE_URL_INVALID]') });
    const down = await runCli(['status', '--json'], { DATABASE_URL: 'postgres://postgres:secret@127.0.0.1:1/test' });
    expect(down.code).toBe(3);
    expect(json(down)).toMatchObject({ error: { code: 'DATABASE_UNAVAILABLE', exitCode: 3 } });
    expect(down.stderr).not.toContain('secret');
    // A password in the query string (node-postgres reads it there too) is masked as well.
    const queryPassword = await runCli(['status', '--database-url', 'postgres://postgres@127.0.0.1:1/test?password=s3cret&sslpassword=k3y']);
    expect(queryPassword.code).toBe(3);
    expect(queryPassword.stderr).toContain('postgres://postgres@127.0.0.1:1/test?password=***&sslpassword=***');
    expect(queryPassword.stderr).not.toMatch(/s3cret|k3y/);
    expect(await runCli(['status', ...db, '--table', 'bad-name'])).toMatchObject({ code: 2, stderr: expect.stringContaining('[INVALID_IDENTIFIER]') });
    expect(await runCli(['frobnicate'])).toMatchObject({ code: 2, stderr: expect.stringContaining('[USAGE_ERROR]') });
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(await runCli(['--version'])).toMatchObject({ code: 0, stdout: `${version}\n` });
    expect(await runCli([])).toMatchObject({ code: 2, stderr: expect.stringContaining('Usage: inboxed') });
  });
});
