import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { beforeEach, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from '../__tests__/migrated-database.js';
import { InboxErrorCodes } from '../errors.js';
import { migrate } from '../migrations/migrate.js';
import { migrations } from '../migrations/migrations.js';
import { auditedPurge, inboxStatus, inspectMessage, listDeadLetters, pendingMigrations, previewPurge, releaseMessage, requeueMessage } from './index.js';

const who = { actor: 'alice', reason: 'worker host lost' };

describe.each(DRIVERS)('@inboxed/core/admin on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  let t: TestDatabase;
  let names: { schema: string };
  const q = (text: string) => t.query(text.replaceAll('$S', `"${t.schema}"`));

  beforeEach(async () => {
    t = database.t;
    names = { schema: t.schema };
    await q(`insert into $S.inbox (consumer, message_id, status, reason, completed_at, lease_expires_at, fencing_token) values
      ('billing', 'done', 'processed', null, now() - interval '3 days', null, 1),
      ('billing', 'refused', 'rejected', 'bad-card', now() - interval '1 hour', null, 1),
      ('billing', 'stuck', 'processing', null, now() - interval '10 minutes', now() + interval '1 hour', 4),
      ('billing', 'expired', 'processing', null, now() - interval '5 minutes', now() - interval '1 minute', 2),
      ('shipping', 'live', 'processing', null, now() - interval '3 days', now() + interval '1 hour', 1)`);
    await q(`insert into $S.inbox_attempts (consumer, message_id, attempts, last_error, last_error_code, last_attempt_at) values
      ('billing', 'stuck', 3, 'boom', 'HANDLER_FAILED', now() - interval '1 minute'),
      ('billing', 'flaky', 2, 'boom', 'HANDLER_TIMEOUT', now()),
      ('billing', 'done', 1, 'old', 'HANDLER_FAILED', now() - interval '3 days')`);
    await q(`insert into $S.inbox_dead_letters (consumer, message_id, reason, error_code, attempts, destination, dead_lettered_at) values
      ('billing', 'poison', 'max-attempts-exceeded', 'MAX_ATTEMPTS_EXCEEDED', 5, 'amqp:billing.dlq', now() - interval '2 days'),
      ('payments', 'p1', 'permanent-failure', 'PERMANENT_FAILURE', 1, 'kafka:payments.dlq', now())`);
  });

  it('reports status per consumer: counts, oldest claim, failing messages, dead-letters, retention lag', async () => {
    const all = await inboxStatus(t.db, names);
    expect(all.map((s) => s.consumer)).toEqual(['billing', 'payments', 'shipping']);
    const billing = all[0]!;
    expect(billing).toMatchObject({ counts: { processed: 1, rejected: 1, processing: 2 }, failingCount: 3, deadLetters: 1 });
    expect(billing.oldestProcessingAgeMs).toBeGreaterThanOrEqual(600_000 - 5_000);
    expect(billing.oldestProcessingAgeMs).toBeLessThan(600_000 + 60_000);
    expect(billing.oldestCompletedAgeMs).toBeGreaterThan(3 * 86_400_000 - 60_000);
    expect(billing.failing.map((f) => [f.messageId, f.attempts, f.lastErrorCode])).toEqual([
      ['flaky', 2, 'HANDLER_TIMEOUT'],
      ['stuck', 3, 'HANDLER_FAILED'],
      ['done', 1, 'HANDLER_FAILED'],
    ]);
    expect(billing.failing[0]!.lastAttemptAt).toBeInstanceOf(Date);
    expect(all[1]).toMatchObject({ counts: { processed: 0, rejected: 0, processing: 0 }, deadLetters: 1, oldestCompletedAgeMs: null, failing: [] });
    expect(await inboxStatus(t.db, names, { consumer: 'shipping' })).toHaveLength(1);
    await expect(inboxStatus(t.db, names, { consumer: 'nobody' })).rejects.toMatchObject({ code: InboxErrorCodes.UNKNOWN_CONSUMER });
  });

  it('inspects a message: inbox row, attempts, dead-letters, audit; unknown ones are told apart', async () => {
    const stuck = await inspectMessage(t.db, names, 'billing', 'stuck');
    expect(stuck.inbox).toMatchObject({ status: 'processing', fencingToken: 4 });
    expect(stuck.inbox!.leaseExpiresAt).toBeInstanceOf(Date);
    expect(stuck.leaseRemainingMs).toBeGreaterThan(3_000_000);
    expect(stuck.attempts).toMatchObject({ attempts: 3, lastErrorCode: 'HANDLER_FAILED' });
    expect(stuck.deadLetters).toEqual([]);
    const poison = await inspectMessage(t.db, names, 'billing', 'poison');
    expect(poison).toMatchObject({
      inbox: null,
      attempts: null,
      deadLetters: [{ reason: 'max-attempts-exceeded', attempts: 5, destination: 'amqp:billing.dlq' }],
    });
    await expect(inspectMessage(t.db, names, 'billing', 'nope')).rejects.toMatchObject({ code: InboxErrorCodes.MESSAGE_NOT_FOUND });
    await expect(inspectMessage(t.db, names, 'nobody', 'nope')).rejects.toMatchObject({ code: InboxErrorCodes.UNKNOWN_CONSUMER });
  });

  it('release revokes a live or expired lease (token + 1, lease given back) and clears attempts, with one audit row in the same transaction', async () => {
    const result = await releaseMessage(t.db, names, 'billing', 'stuck', who);
    expect(result.changes).toHaveLength(2);
    const [row] = await q(`select status, fencing_token, lease_expires_at is null as given_back from $S.inbox where message_id = 'stuck'`);
    expect(row).toEqual({ status: 'processing', fencing_token: 5, given_back: true });
    expect(await q(`select 1 from $S.inbox_attempts where message_id = 'stuck'`)).toEqual([]);
    const audit = await q(`select actor, action, consumer, message_id, reason, before, after from $S.inbox_audit`);
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ actor: 'alice', action: 'release', consumer: 'billing', message_id: 'stuck', reason: 'worker host lost' });
    const { before, after } = audit[0] as { before: any; after: any };
    expect(before.inbox).toMatchObject({ status: 'processing', fencing_token: 4 });
    expect(before.attempts).toMatchObject({ attempts: 3 });
    expect(after.attempts).toBeNull();
    expect(after.inbox).toMatchObject({ status: 'processing', fencing_token: 5 });
    expect(result.audit.actor).toBe('alice');
    // A claim whose lease already ran out (its holder died) is given back too: otherwise the next
    // delivery would take it over and count the dead attempt against the fresh budget.
    expect((await releaseMessage(t.db, names, 'billing', 'expired', who)).changes).toHaveLength(1);
    const [expired] = await q(`select fencing_token, lease_expires_at is null as given_back from $S.inbox where message_id = 'expired'`);
    expect(expired).toEqual({ fencing_token: 3, given_back: true });
    await expect(releaseMessage(t.db, names, 'billing', 'expired', who)).rejects.toMatchObject({ code: InboxErrorCodes.NOTHING_TO_RELEASE });
    await expect(releaseMessage(t.db, names, 'billing', 'stuck', who)).rejects.toMatchObject({ code: InboxErrorCodes.NOTHING_TO_RELEASE });
    expect(await q(`select count(*)::int as n from $S.inbox_audit`)).toEqual([{ n: 2 }]);
  });

  it('never releases or requeues a completed message, and writes no audit row for a refusal', async () => {
    const before = await q(`select * from $S.inbox order by message_id`);
    for (const repair of [releaseMessage, requeueMessage]) {
      await expect(repair(t.db, names, 'billing', 'done', who)).rejects.toMatchObject({ code: InboxErrorCodes.ALREADY_COMPLETED });
      await expect(repair(t.db, names, 'billing', 'refused', who)).rejects.toMatchObject({ code: InboxErrorCodes.ALREADY_COMPLETED });
      await expect(repair(t.db, names, 'nobody', 'x', who)).rejects.toMatchObject({ code: InboxErrorCodes.UNKNOWN_CONSUMER });
    }
    await expect(releaseMessage(t.db, names, 'billing', 'stuck', { actor: 'alice', reason: ' ' })).rejects.toMatchObject({
      code: InboxErrorCodes.INVALID_OPTIONS,
    });
    expect(await q(`select * from $S.inbox order by message_id`)).toEqual(before);
    expect(await q(`select count(*)::int as n from $S.inbox_attempts where message_id = 'done'`)).toEqual([{ n: 1 }]);
    expect(await q(`select count(*)::int as n from $S.inbox_audit`)).toEqual([{ n: 0 }]);
  });

  it('requeue deletes the attempts record (fresh budget), audited; without one there is nothing to requeue', async () => {
    const result = await requeueMessage(t.db, names, 'billing', 'flaky', { actor: 'bob', reason: 'fixed the bug' });
    expect(result.before.attempts).toMatchObject({ attempts: 2 });
    expect(result.after).toEqual({ inbox: null, attempts: null });
    expect(await q(`select 1 from $S.inbox_attempts where message_id = 'flaky'`)).toEqual([]);
    expect(await q(`select actor, action, reason, after from $S.inbox_audit`)).toEqual([
      { actor: 'bob', action: 'requeue', reason: 'fixed the bug', after: { inbox: null, attempts: null } },
    ]);
    await expect(requeueMessage(t.db, names, 'billing', 'poison', who)).rejects.toMatchObject({ code: InboxErrorCodes.NOTHING_TO_REQUEUE });
    expect((await inspectMessage(t.db, names, 'billing', 'flaky')).audit).toMatchObject([{ action: 'requeue', actor: 'bob' }]);
  });

  it('lists dead-letters newest first, by consumer and since', async () => {
    expect((await listDeadLetters(t.db, names)).map((d) => d.messageId)).toEqual(['p1', 'poison']);
    expect((await listDeadLetters(t.db, names, { consumer: 'billing' })).map((d) => d.messageId)).toEqual(['poison']);
    expect((await listDeadLetters(t.db, names, { since: new Date(Date.now() - 3_600_000) })).map((d) => d.messageId)).toEqual(['p1']);
    expect(await listDeadLetters(t.db, names, { limit: 1 })).toHaveLength(1);
    await expect(listDeadLetters(t.db, names, { limit: 0 })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_OPTIONS });
  });

  it('previews a purge with purgeInbox’s predicate, then purges and audits it', async () => {
    const window = { olderThanMs: 86_400_000 };
    // 'done' (3 days) and the attempts of 'done'; never 'live' (a live lease, however old).
    expect(await previewPurge(t.db, names, window)).toEqual({ inbox: 1, attempts: 1 });
    expect(await previewPurge(t.db, names, { ...window, consumer: 'shipping' })).toEqual({ inbox: 0, attempts: 0 });
    const result = await auditedPurge(t.db, names, { ...window, batchSize: 10, actor: 'cron' });
    expect(result).toMatchObject({ deleted: 1, attemptsDeleted: 1 });
    expect(await previewPurge(t.db, names, window)).toEqual({ inbox: 0, attempts: 0 });
    expect(await q(`select actor, action, consumer, before, after from $S.inbox_audit`)).toEqual([
      { actor: 'cron', action: 'purge', consumer: null, before: null, after: { deleted: 1, attemptsDeleted: 1, olderThanMs: 86_400_000, batchSize: 10 } },
    ]);
  });

  it('reports pending migrations, and missing tables as INBOX_TABLE_MISSING', async () => {
    expect(await pendingMigrations(t.db, names)).toEqual([]);
    const fresh = { schema: t.schema, table: 'other' };
    expect(await pendingMigrations(t.db, fresh)).toEqual(migrations.map((m) => ({ version: m.version, name: m.name })));
    await expect(inboxStatus(t.db, fresh)).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING });
    await expect(releaseMessage(t.db, fresh, 'c', 'm', who)).rejects.toMatchObject({ code: InboxErrorCodes.INBOX_TABLE_MISSING });
    await migrate(t.db, fresh);
    expect(await pendingMigrations(t.db, fresh)).toEqual([]);
    expect((await pendingMigrations(t.db, { schema: `${t.schema}_absent` })).length).toBe(migrations.length);
  });
});

describe('@inboxed/core/admin given hostile keys and windows (node-postgres)', () => {
  const database = useMigratedDatabase('node-postgres');

  it('refuses a NUL or a lone surrogate in a consumer or message id as INVALID_OPTIONS, and never acts on the stored U+FFFD id', async () => {
    const { t } = database;
    const tables = { schema: t.schema };
    await t.query(
      `insert into "${t.schema}".inbox (consumer, message_id, status, lease_expires_at) values ('c', E'a\\uFFFD', 'processing', now() + interval '1 hour')`,
    );
    const invalid = { code: InboxErrorCodes.INVALID_OPTIONS };
    await expect(inboxStatus(t.db, tables, { consumer: 'c\u0000' })).rejects.toMatchObject(invalid);
    await expect(inspectMessage(t.db, tables, 'c', 'a\u0000')).rejects.toMatchObject(invalid);
    await expect(listDeadLetters(t.db, tables, { consumer: 'c\u0000' })).rejects.toMatchObject(invalid);
    await expect(previewPurge(t.db, tables, { olderThanMs: 1000, consumer: 'c\u0000' })).rejects.toMatchObject(invalid);
    await expect(inspectMessage(t.db, tables, 'c', 'a\uD800')).rejects.toMatchObject(invalid);
    await expect(releaseMessage(t.db, tables, 'c', 'a\uD800', who)).rejects.toMatchObject(invalid);
    await expect(requeueMessage(t.db, tables, 'c\uDC00', 'a', who)).rejects.toMatchObject(invalid);
    expect(await t.query(`select fencing_token, lease_expires_at > now() as live from "${t.schema}".inbox`)).toEqual([{ fencing_token: 1, live: true }]);
    expect(await t.query(`select count(*)::int as n from "${t.schema}".inbox_audit`)).toEqual([{ n: 0 }]);
  });

  it('refuses a since outside the years 1 to 9999 as INVALID_OPTIONS', async () => {
    const tables = { schema: database.t.schema };
    for (const since of [new Date(8.64e15), new Date('0000-01-01T00:00:00Z'), new Date(Number.NaN)]) {
      await expect(listDeadLetters(database.t.db, tables, { since })).rejects.toMatchObject({ code: InboxErrorCodes.INVALID_OPTIONS });
    }
    expect(await listDeadLetters(database.t.db, tables, { since: new Date('0001-01-01T00:00:00Z') })).toEqual([]);
  });

  it('auditedPurge reports and audits the attempts records it deleted', async () => {
    const { t } = database;
    const tables = { schema: t.schema };
    await t.query(
      `insert into "${t.schema}".inbox_attempts (consumer, message_id, attempts, last_attempt_at) values ('c', 'x', 2, now() - interval '2 days'), ('c', 'y', 1, now() - interval '2 days')`,
    );
    const result = await auditedPurge(t.db, tables, { olderThanMs: 86_400_000, actor: 'alice' });
    expect(result).toMatchObject({ deleted: 0, attemptsDeleted: 2 });
    expect(result.audit.after).toMatchObject({ deleted: 0, attemptsDeleted: 2, olderThanMs: 86_400_000 });
  });
});
