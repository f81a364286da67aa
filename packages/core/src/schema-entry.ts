/**
 * `@inboxed/core/schema`: only the Drizzle table definitions of the inbox, for the schema file
 * drizzle-kit reads. It imports nothing but drizzle-orm (`drizzle-orm/pg-core` and `sql`), so drizzle-kit (which loads
 * schema files through `require`) never evaluates the rest of inboxed.
 *
 * ```ts
 * // db/schema.ts: public.inbox and public.inbox_attempts
 * export { inboxTable, inboxAttemptsTable, inboxDeadLettersTable, inboxAuditTable } from '@inboxed/core/schema';
 * ```
 *
 * ```ts
 * // db/schema.ts: messaging.inbox and messaging.inbox_attempts; inboxSchema makes drizzle-kit emit CREATE SCHEMA
 * import { createInboxTables } from '@inboxed/core/schema';
 * export const { inboxSchema, inbox, inboxAttempts, inboxDeadLetters, inboxAudit } = createInboxTables({ schema: 'messaging' });
 * ```
 *
 * @packageDocumentation
 */
export {
  createInboxTables,
  inboxTable,
  inboxAttemptsTable,
  inboxDeadLettersTable,
  inboxAuditTable,
  type CreatedInboxTables,
  type InboxTableNames,
  type InboxTables,
} from './schema.js';
