import { inboxStatus, listDeadLetters } from '@inboxed/core/admin';
import type { CommandContext } from '../context.js';
import { ExitCodes } from '../exit-codes.js';
import { type CommandOutput, cell, formatDate, renderTable } from '../output.js';

/** `inboxed dead-letters [--consumer c] [--since 2h|ISO] [--limit n]`: recorded dead-letters, newest first. */
export async function deadLettersCommand(context: CommandContext, options: { consumer?: string; since?: Date; limit?: number }): Promise<CommandOutput> {
  // A consumer with no row anywhere is a typo more often than a clean bill of health.
  if (options.consumer !== undefined) await inboxStatus(context.db, context.names, { consumer: options.consumer, failingLimit: 0 });
  const deadLetters = await listDeadLetters(context.db, context.names, options);
  const text =
    deadLetters.length === 0
      ? 'No dead-letters recorded.'
      : renderTable(
          ['AT', 'CONSUMER', 'MESSAGE', 'REASON', 'CODE', 'ATTEMPTS', 'DESTINATION'],
          deadLetters.map((d) => [formatDate(d.deadLetteredAt), d.consumer, d.messageId, d.reason, cell(d.errorCode), String(d.attempts), cell(d.destination)]),
        );
  return { exitCode: ExitCodes.OK, json: { deadLetters }, text };
}
