import { inboxStatus } from '@inboxed/core/admin';
import type { CommandContext } from '../context.js';
import { ExitCodes } from '../exit-codes.js';
import { type CommandOutput, cell, formatAge, formatDate, escapeText, renderTable } from '../output.js';

/** `inboxed status [--consumer c]`: per consumer, rows by status, open claims, failing messages, dead-letters, retention lag. */
export async function statusCommand(context: CommandContext, options: { consumer?: string }): Promise<CommandOutput> {
  const consumers = await inboxStatus(context.db, context.names, options.consumer === undefined ? {} : { consumer: options.consumer });
  if (consumers.length === 0) return { exitCode: ExitCodes.OK, json: { consumers }, text: 'No consumers yet: the inbox tables are empty.' };
  const parts = [
    renderTable(
      ['CONSUMER', 'PROCESSED', 'REJECTED', 'PROCESSING', 'OLDEST CLAIM', 'FAILING', 'DEAD-LETTERS', 'OLDEST COMPLETED'],
      consumers.map((s) => [
        s.consumer,
        String(s.counts.processed),
        String(s.counts.rejected),
        String(s.counts.processing),
        formatAge(s.oldestProcessingAgeMs),
        String(s.failingCount),
        String(s.deadLetters),
        formatAge(s.oldestCompletedAgeMs),
      ]),
    ),
  ];
  for (const s of consumers) {
    if (s.failing.length === 0) continue;
    const more = s.failingCount > s.failing.length ? ` (latest ${s.failing.length} of ${s.failingCount})` : '';
    parts.push(
      `Failing messages of ${escapeText(s.consumer)}${more}:\n${renderTable(
        ['MESSAGE', 'ATTEMPTS', 'LAST ERROR', 'LAST ATTEMPT'],
        s.failing.map((f) => [f.messageId, String(f.attempts), cell(f.lastErrorCode), formatDate(f.lastAttemptAt)]),
      )}`,
    );
  }
  return { exitCode: ExitCodes.OK, json: { consumers }, text: parts.join('\n\n') };
}
