import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { migrate, withInbox, type InboxMessage } from '@inboxed/core';
import { createTestDatabase, databaseUrl, type TestDatabase } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const worker = fileURLToPath(new URL('./fixtures/crash-worker.ts', import.meta.url));

/** Runs the crash worker: SIGKILLs it once it prints `line`, or lets it exit; resolves with its output. */
function runOnce(line: string, env: Record<string, string>): Promise<{ out: string; killed: boolean }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', worker], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes(line)) child.kill('SIGKILL');
    });
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.on('exit', (code, signal) => {
      if (signal === 'SIGKILL') resolve({ out, killed: true });
      else if (code === 0) resolve({ out, killed: false });
      else reject(new Error(`worker failed (${code}): ${out}${err}`));
    });
  });
}

/** Runs the crash worker until it prints `line`, then SIGKILLs it; rejects if it ends otherwise. */
async function runUntil(line: string, env: Record<string, string>): Promise<string> {
  const { out, killed } = await runOnce(line, env);
  if (!killed) throw new Error(`worker exited without reaching ${line}: ${out}`);
  return out;
}

describe('a consumer process killed with SIGKILL', () => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: 'crash' });
    await migrate(t.db, { schema: t.schema });
  });
  afterEach(async () => {
    await t.close();
  });

  const redeliver = (id: string) =>
    withInbox(
      async (message: InboxMessage, tx) => {
        await tx.insert(t.effects).values({ messageId: message.id });
      },
      { db: t.db, consumer: 'crash-test', tables: { schema: t.schema } },
    )({ id, payload: { n: 1 } });

  it('inside the transaction: nothing persists, and the redelivery is processed once', async () => {
    await runUntil('WROTE-UNCOMMITTED', { DATABASE_URL: databaseUrl(), SCHEMA: t.schema, MESSAGE_ID: 'k-1', CRASH_AT: 'in-transaction' });
    // The server rolls the dead session back; until it notices, the redelivery waits on the row
    // lock (bounded by lockTimeoutMs) or claims it.
    expect(await t.countEffects()).toBe(0);
    expect((await redeliver('k-1')).status).toBe('processed');
    expect(await t.countEffects('k-1')).toBe(1);
  });

  it('after commit, before the ack: the redelivery is a duplicate, exactly one effect', async () => {
    const out = await runUntil('OUTCOME', { DATABASE_URL: databaseUrl(), SCHEMA: t.schema, MESSAGE_ID: 'k-2', CRASH_AT: 'before-ack' });
    expect(out).toContain('OUTCOME processed');
    expect((await redeliver('k-2')).status).toBe('duplicate');
    expect(await t.countEffects('k-2')).toBe(1);
  });

  it('a message that kills the process every time: its redeliveries are counted before they run, and it is dead-lettered after maxAttempts', async () => {
    const env = { DATABASE_URL: databaseUrl(), SCHEMA: t.schema, MESSAGE_ID: 'poison', CRASH_AT: 'in-transaction', MAX_ATTEMPTS: '3' };
    // The first delivery is not marked redelivered: its death is not counted, as a broker would not know either.
    expect((await runOnce('WROTE-UNCOMMITTED', env)).killed).toBe(true);
    const attempts = () => t.query<{ attempts: number; last_error_code: string }>(`select attempts, last_error_code from "${t.schema}".inbox_attempts`);
    for (let death = 1; death <= 3; death++) {
      expect((await runOnce('WROTE-UNCOMMITTED', { ...env, REDELIVERED: '1' })).killed).toBe(true);
      expect(await attempts()).toEqual([{ attempts: death, last_error_code: 'ATTEMPT_UNFINISHED' }]);
    }
    // The next redelivery does not run the handler (it would kill the process again): dead-letter.
    const last = await runOnce('WROTE-UNCOMMITTED', { ...env, REDELIVERED: '1' });
    expect(last).toMatchObject({ killed: false });
    expect(last.out).toContain('OUTCOME dead-letter');
    expect(await t.countEffects()).toBe(0);
    expect(await attempts()).toEqual([{ attempts: 3, last_error_code: 'ATTEMPT_UNFINISHED' }]);
  });

  it('a redelivery after one death that then succeeds is processed once, and only the death stays counted', async () => {
    const env = { DATABASE_URL: databaseUrl(), SCHEMA: t.schema, MESSAGE_ID: 'k-3', CRASH_AT: 'in-transaction', REDELIVERED: '1' };
    await runOnce('WROTE-UNCOMMITTED', env);
    const ok = await withInbox(
      async (message: InboxMessage, tx) => {
        await tx.insert(t.effects).values({ messageId: message.id });
      },
      { db: t.db, consumer: 'crash-test', tables: { schema: t.schema } },
    )({ id: 'k-3', payload: { n: 1 }, redelivered: true });
    expect(ok.status).toBe('processed');
    expect(await t.countEffects('k-3')).toBe(1);
    expect(await t.query(`select attempts from "${t.schema}".inbox_attempts`)).toEqual([{ attempts: 1 }]);
    // A redelivery of a processed message is a duplicate and counts nothing.
    expect((await redeliver('k-3')).status).toBe('duplicate');
    expect(await t.query(`select attempts from "${t.schema}".inbox_attempts`)).toEqual([{ attempts: 1 }]);
  });
});
