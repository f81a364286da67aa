import { migrate } from '@inboxed/core';
import { pendingMigrations } from '@inboxed/core/admin';
import type { CommandContext } from '../context.js';
import { ExitCodes } from '../exit-codes.js';
import type { CommandOutput } from '../output.js';

/** `inboxed migrate [--check]`: applies pending migrations, or (`--check`) lists them and exits 1 when there are any. */
export async function migrateCommand(context: CommandContext, options: { check?: boolean }): Promise<CommandOutput> {
  if (options.check === true) {
    const pending = await pendingMigrations(context.db, context.names);
    if (pending.length === 0) return { exitCode: ExitCodes.OK, json: { upToDate: true, pending: [] }, text: 'Up to date: no pending migrations.' };
    return {
      exitCode: ExitCodes.CHECK_FAILED,
      json: { upToDate: false, pending },
      text: ['Pending migrations (run `inboxed migrate`):', ...pending.map((m) => `  ${String(m.version).padStart(4, '0')}_${m.name}`)].join('\n'),
    };
  }
  const result = await migrate(context.db, context.names);
  const text =
    result.applied.length === 0
      ? `Up to date: schema version ${result.version}.`
      : `Applied migration${result.applied.length === 1 ? '' : 's'} ${result.applied.join(', ')}; schema version ${result.version}.`;
  return { exitCode: ExitCodes.OK, json: result, text };
}
