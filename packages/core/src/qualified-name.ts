import { getTableConfig } from 'drizzle-orm/pg-core';
import type { InboxTables } from './schema.js';

/**
 * @internal `"schema"."table"` (or `"table"`) of one inbox table, for raw SQL. Plain quoting is
 * exact: `createInboxTables` accepts only plain identifiers (`assertIdentifier`).
 */
export function qualifiedName(table: InboxTables[keyof InboxTables]): string {
  const config = getTableConfig(table);
  return config.schema === undefined ? `"${config.name}"` : `"${config.schema}"."${config.name}"`;
}
