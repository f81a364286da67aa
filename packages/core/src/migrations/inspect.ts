import { sql } from 'drizzle-orm';
import { getTableConfig } from 'drizzle-orm/pg-core';
import { qualifiedName } from '../qualified-name.js';
import { rowsOf } from '../query-rows.js';
import type { InboxTables } from '../schema.js';
import type { AnyPgDatabase } from '../types.js';

type Executable = Pick<AnyPgDatabase, 'execute'>;

interface IndexRow {
  usable: boolean;
  columns: string[];
}

/**
 * @internal What is wrong with the inbox tables as they exist in the database, as sentences; empty
 * when nothing is. Checked: every table exists with the columns inboxed writes, and the inbox and
 * attempts tables have a unique key on exactly `(consumer, message_id)` that `ON CONFLICT` can use
 * (not partial, not on expressions, not deferrable, valid). Without that key every redelivery would
 * be processed again, silently. (The dead-letter and audit tables are append-only records: no key.)
 */
export async function inspectInboxTables(db: Executable, tables: InboxTables): Promise<string[]> {
  const problems: string[] = [];
  const keyed = new Set<unknown>([tables.inbox, tables.inboxAttempts]);
  for (const table of [tables.inbox, tables.inboxAttempts, tables.inboxDeadLetters, tables.inboxAudit]) {
    const config = getTableConfig(table);
    const name = qualifiedName(table);
    const [found] = await rowsOf<{ oid: number | null }>(db, sql`select to_regclass(${name})::oid as oid`);
    if (found?.oid === null || found?.oid === undefined) {
      problems.push(`table ${name} does not exist`);
      continue;
    }
    const oid = Number(found.oid);
    const columns = new Set(
      (
        await rowsOf<{ name: string }>(
          db,
          sql`
      select attname::text as name from pg_attribute where attrelid = ${oid} and attnum > 0 and not attisdropped`,
        )
      ).map((r) => r.name),
    );
    const missing = config.columns.map((c) => c.name).filter((c) => !columns.has(c));
    if (missing.length > 0) problems.push(`table ${name} lacks the column(s) ${missing.join(', ')}`);
    if (!keyed.has(table)) continue;
    const indexes = await rowsOf<IndexRow>(
      db,
      sql`
      select (i.indisunique and i.indimmediate and i.indisvalid and i.indpred is null and i.indexprs is null) as usable,
             array(select a.attname::text from unnest(i.indkey::int2[]) with ordinality as k(attnum, position)
                   join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
                   where k.position <= i.indnkeyatts order by k.position) as columns
      from pg_index i where i.indrelid = ${oid} and i.indisunique`,
    );
    const hasKey = indexes.some(
      (index) => index.usable && index.columns.length === 2 && index.columns.includes('consumer') && index.columns.includes('message_id'),
    );
    if (!hasKey) {
      const found = indexes.map((index) => `(${index.columns.join(', ')})${index.usable ? '' : ' unusable'}`).join(', ') || 'none';
      problems.push(
        `table ${name} has no primary key or unique constraint on exactly (consumer, message_id) that ON CONFLICT can use (unique keys found: ${found}); without it every redelivery would be processed again`,
      );
    }
  }
  return problems;
}
