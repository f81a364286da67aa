import { userInfo } from 'node:os';
import type { AnyPgDatabase, InboxTableNames } from '@inboxed/core';
import { connect, resolveDatabaseUrl } from './connect.js';

/** The options every command takes. */
export interface GlobalOptions {
  databaseUrl?: string;
  schema?: string;
  table?: string;
  actor?: string;
  json?: boolean;
}

/** What a command runs with: the open database, the inbox's names, and who is acting. */
export interface CommandContext {
  db: AnyPgDatabase;
  names: InboxTableNames;
  actor: string;
}

/** `--actor`, else the OS user running the CLI, else `$USER`, else `unknown`. */
export function resolveActor(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  if (flag !== undefined && flag.trim() !== '') return flag;
  try {
    const name = userInfo().username;
    if (name !== '') return name;
  } catch {
    // No passwd entry for this uid (a container running as an arbitrary user).
  }
  return env.USER !== undefined && env.USER !== '' ? env.USER : 'unknown';
}

/** `{ schema, table }` from `--schema` and `--table` (defaults: the connection's schema, `inbox`). */
export function tableNames(options: GlobalOptions): InboxTableNames {
  return { ...(options.schema === undefined ? {} : { schema: options.schema }), ...(options.table === undefined ? {} : { table: options.table }) };
}

/** Connects, runs `command`, and always closes the pool. */
export async function withContext<T>(options: GlobalOptions, env: NodeJS.ProcessEnv, command: (context: CommandContext) => Promise<T>): Promise<T> {
  const names = tableNames(options);
  const actor = resolveActor(options.actor, env);
  const connection = await connect(resolveDatabaseUrl(options.databaseUrl, env));
  try {
    return await command({ db: connection.db, names, actor });
  } finally {
    await connection.close();
  }
}
