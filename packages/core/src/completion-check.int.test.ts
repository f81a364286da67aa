import { DRIVERS } from '@inboxed/test-support';
import { type SQL, sql } from 'drizzle-orm';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { type ClaimRow, type Claimed, claimedOf, InboxStore } from './inbox-store.js';
import { createInboxTables } from './schema.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';

// The completion check of a batch first looks for the claimed rows where the claim put them (a TID
// scan) and probes the unique index only when that misses; one message is one index probe. These tests read the executed plan (EXPLAIN
// ANALYZE of the check itself) to show which path ran, and the database's state to show that the
// fast path is exactly as strict as the probes: a moved row still passes, a missing row never does.
// On the core-partitioned project the inbox has 8 partitions, which repeat the same ctids: there the
// check always probes.
const partitioned = process.env.INBOXED_PARTITIONS !== undefined;

type PlanNode = { 'Node Type': string; 'Actual Loops'?: number; Plans?: PlanNode[] };
const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];
const ran = (plan: PlanNode, type: RegExp) => nodesOf(plan).filter((n) => type.test(n['Node Type']) && (n['Actual Loops'] ?? 0) > 0).length;

async function rowsOf<T>(tx: { execute(q: SQL): Promise<unknown> }, query: SQL): Promise<T[]> {
  const result = (await tx.execute(query)) as unknown;
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[];
}

describe.each(DRIVERS)('the completion check on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  const rows = (n: number): ClaimRow[] =>
    Array.from({ length: n }, (_, i) => ({ messageId: `m-${String(i).padStart(3, '0')}`, fingerprint: null, source: undefined, receivedAt: undefined }));

  /**
   * Claims `n` rows, lets `meddle` change the transaction, then EXPLAIN ANALYZEs the check; rolls
   * back. On node-postgres the claim and the check are the inline-literal texts that driver sends
   * (`claimText`, `verifyText`); on the others, the parameterised statements.
   */
  async function explainCheck(
    n: number,
    meddle: (run: (text: string) => Promise<unknown>, inbox: string) => Promise<void> = async () => {},
  ): Promise<PlanNode> {
    const { t } = database;
    const store = new InboxStore(createInboxTables({ schema: t.schema }), 'c');
    const inbox = `"${t.schema}".inbox`;
    await store.pinSchema(t.db); // as every inbox transaction does first: learns whether the inbox is partitioned
    if (driver === 'node-postgres') {
      const client = await (t.db.$client as pg.Pool).connect();
      try {
        await client.query('begin');
        const quote = (value: string) => client.escapeLiteral(value);
        const claimed = claimedOf((await client.query(store.claimText(rows(n), quote, null))).rows);
        expect(claimed.ids.size).toBe(n);
        expect(claimed.tids).toHaveLength(partitioned || n === 1 ? 0 : n);
        await meddle((text) => client.query(text), inbox);
        // The check may come after a SET LOCAL (TID_SCAN_ONLY): run that, explain the check.
        const statements = store.verifyText([...claimed.ids], claimed.tids, quote).split(/;\s(?=select)/);
        const check = statements.pop()!;
        for (const statement of statements) await client.query(statement);
        const [row] = (await client.query(`explain (analyze, format json) ${check}`)).rows;
        return row['QUERY PLAN'][0].Plan;
      } finally {
        await client.query('rollback').catch(() => undefined);
        client.release();
      }
    }
    let plan: PlanNode | undefined;
    await t.db
      .transaction(async (tx: any) => {
        const claimed: Claimed = await store.claim(tx, rows(n), null);
        expect(claimed.ids.size).toBe(n);
        expect(claimed.tids).toHaveLength(partitioned || n === 1 ? 0 : n);
        await meddle((text) => tx.execute(sql.raw(text)), inbox);
        // The statements as the drizzle path would send them, captured instead of run: any before
        // the check (TID_SCAN_ONLY) run as they are, the check itself under EXPLAIN ANALYZE.
        const statements: SQL[] = [];
        const capture = async (q: SQL) => {
          statements.push(q);
        };
        await store.verify({ execute: capture as never }, [...claimed.ids], claimed.tids);
        const check = statements.pop()!;
        for (const statement of statements) await tx.execute(statement);
        const [row] = await rowsOf<{ 'QUERY PLAN': unknown }>(tx, sql`explain (analyze, format json) ${check}`);
        const json = row!['QUERY PLAN'];
        plan = (typeof json === 'string' ? JSON.parse(json) : json)[0].Plan;
        throw new Error('roll back');
      })
      .catch((error: Error) => {
        // Drizzle wraps a failed query; the check's own error is its cause.
        if (error.message !== 'roll back') throw error.cause ?? error;
      });
    return plan!;
  }

  /** Fills the inbox with `n` committed rows of the same consumer, as a running deployment has. */
  const grow = (n: number) =>
    database.t.query(
      `insert into "${database.t.schema}".inbox (consumer, message_id, status) select 'c', 'old-' || g, 'processed' from generate_series(1, ${n}) g`,
    );

  /** A batch's check found its rows by one TID scan, no index probe (by the probes on a partitioned inbox), never by a sequential scan. */
  const expectFoundByTupleId = (plan: PlanNode) => {
    expect(ran(plan, /Seq Scan/)).toBe(0);
    if (partitioned) expect(ran(plan, /Index/)).toBeGreaterThan(0);
    else {
      expect(ran(plan, /Tid Scan/)).toBe(1);
      expect(ran(plan, /Index/)).toBe(0);
    }
  };

  it('on a fresh inbox, finds a batch where the claim put it: a TID scan, no index probe', async () => {
    expectFoundByTupleId(await explainCheck(40));
  });

  it('on a grown inbox (5,000 rows, which PostgreSQL would rather read whole), finds a batch by TID, no index probe; one message by one index probe; a moved row sends a batch to the probes', async () => {
    await grow(5_000);
    expectFoundByTupleId(await explainCheck(40));
    // One message: the unique key alone (cheaper to plan than the TID scan with its fallback).
    const single = await explainCheck(1);
    expect(ran(single, /Seq Scan|Tid Scan/)).toBe(0);
    expect(ran(single, /Index/)).toBe(1);
    // A row this transaction moved (an update, as a rejection does) is found by the index probes instead.
    const moved = await explainCheck(40, async (run, inbox) => {
      await run(`update ${inbox} set reason = 'moved' where consumer = 'c' and message_id = 'm-007'`);
    });
    expect(ran(moved, /Index/)).toBeGreaterThan(0);
  });

  it('a row the handler deleted fails the check, whichever path looks', async () => {
    await expect(
      explainCheck(40, async (run, inbox) => {
        await run(`delete from ${inbox} where consumer = 'c' and message_id = 'm-013'`);
      }),
    ).rejects.toThrow(/inboxed:claim-lost 39\/40/);
    await expect(
      explainCheck(1, async (run, inbox) => {
        await run(`delete from ${inbox} where consumer = 'c' and message_id = 'm-000'`);
      }),
    ).rejects.toThrow(/inboxed:claim-lost 0\/1/);
  });

  it('a deleted row is not made up for by another row at one of the claimed ctids', async () => {
    // Replace a claimed row by an unrelated row of the same consumer: the count of rows at the
    // claimed ctids must not reach 40 through it (on a partitioned inbox, through another partition).
    await expect(
      explainCheck(40, async (run, inbox) => {
        await run(`delete from ${inbox} where consumer = 'c' and message_id = 'm-000'`);
        await run(`insert into ${inbox} (consumer, message_id, status) select 'c', 'other-' || g, 'processed' from generate_series(1, 200) g`);
      }),
    ).rejects.toThrow(/inboxed:claim-lost 39\/40/);
  });

  it('tuple ids that do not look like tuple ids are not used', () => {
    expect(
      claimedOf([
        { message_id: 'a', tid: "(0,1)'); drop table x; --" },
        { message_id: 'b', tid: '(3,7)' },
      ]).tids,
    ).toEqual(['(3,7)']);
  });

  it('withInbox: a handler that updates its own inbox row still commits once (processed, the effect there)', async () => {
    const { t } = database;
    const handler = withInbox(async (message, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      await tx.execute(sql.raw(`update "${t.schema}".inbox set source = 'touched' where message_id = '${message.id}'`));
    }, database.options());
    expect((await handler({ id: 'moved-1', payload: {} })).status).toBe('processed');
    expect(await t.countEffects('moved-1')).toBe(1);
    expect((await handler({ id: 'moved-1', payload: {} })).status).toBe('duplicate');
  });

  it('withInboxBatch: a handler that deletes one claimed row never commits that message; the rest commit once', async () => {
    const { t } = database;
    const handler = withInboxBatch(
      async (messages, tx: any) => {
        for (const message of messages) await tx.insert(t.effects).values({ messageId: message.id });
        await tx.execute(sql.raw(`delete from "${t.schema}".inbox where message_id = 'b-05'`));
      },
      database.options({ maxAttempts: 1 }),
    );
    const outcomes = await handler(Array.from({ length: 20 }, (_, i) => ({ id: `b-${String(i).padStart(2, '0')}`, payload: {} })));
    // The batch is split down to the message whose row went missing: the halves without it commit.
    expect(outcomes[5]).toMatchObject({ status: 'dead-letter', error: { code: 'MAX_ATTEMPTS_EXCEEDED' } });
    expect(await t.query(`select message_id, last_error_code from "${t.schema}".inbox_attempts`)).toEqual([
      { message_id: 'b-05', last_error_code: 'TRANSACTION_ENDED' },
    ]);
    expect(await t.countEffects('b-05')).toBe(0);
    const processed = outcomes.filter((o) => o.status === 'processed').map((o) => o.messageId);
    expect(processed).toHaveLength(19);
    for (const id of processed) expect(await t.countEffects(id)).toBe(1);
    expect(await t.countEffects()).toBe(19);
  });
});
