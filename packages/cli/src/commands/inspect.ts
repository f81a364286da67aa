import { inspectMessage } from '@inboxed/core/admin';
import type { CommandContext } from '../context.js';
import { ExitCodes } from '../exit-codes.js';
import { type CommandOutput, cell, formatAge, formatDate, quote, renderFields, renderTable } from '../output.js';

/** `inboxed inspect <consumer> <message-id>`: the message's inbox row, attempts, dead-letters and audit trail. */
export async function inspectCommand(context: CommandContext, consumer: string, messageId: string): Promise<CommandOutput> {
  const found = await inspectMessage(context.db, context.names, consumer, messageId);
  const parts = [`Message ${quote(messageId)} of consumer ${quote(consumer)}`];
  const inbox = found.inbox;
  parts.push(
    inbox === null
      ? 'Inbox row: none (never completed nor claimed, or purged)'
      : `Inbox row:\n${renderFields([
          ['status', inbox.status],
          ['reason', cell(inbox.reason)],
          ['source', cell(inbox.source)],
          ['received at', formatDate(inbox.receivedAt)],
          ['completed at', formatDate(inbox.completedAt)],
          ['lease expires', inbox.leaseExpiresAt === null ? '-' : `${formatDate(inbox.leaseExpiresAt)} (${formatAge(found.leaseRemainingMs)} left)`],
          ['fencing token', String(inbox.fencingToken)],
          ['fingerprint', cell(inbox.fingerprint)],
          ['stored result', inbox.result === null ? '-' : `${inbox.result.length} characters of JSON`],
        ])
          .split('\n')
          .map((line) => `  ${line}`)
          .join('\n')}`,
  );
  const attempts = found.attempts;
  parts.push(
    attempts === null
      ? 'Attempts: none on record'
      : `Attempts:\n${renderFields([
          ['attempts', String(attempts.attempts)],
          ['first attempt', formatDate(attempts.firstAttemptAt)],
          ['last attempt', formatDate(attempts.lastAttemptAt)],
          ['last error code', cell(attempts.lastErrorCode)],
          ['last error', cell(attempts.lastError)],
        ])
          .split('\n')
          .map((line) => `  ${line}`)
          .join('\n')}`,
  );
  parts.push(
    found.deadLetters.length === 0
      ? 'Dead-letters: none'
      : `Dead-letters:\n${renderTable(
          ['AT', 'REASON', 'CODE', 'ATTEMPTS', 'DESTINATION'],
          found.deadLetters.map((d) => [formatDate(d.deadLetteredAt), d.reason, cell(d.errorCode), String(d.attempts), cell(d.destination)]),
        )}`,
  );
  parts.push(
    found.audit.length === 0
      ? 'Repairs: none'
      : `Repairs:\n${renderTable(
          ['AT', 'ACTION', 'ACTOR', 'REASON'],
          found.audit.map((a) => [formatDate(a.at), a.action, a.actor, cell(a.reason)]),
        )}`,
  );
  return { exitCode: ExitCodes.OK, json: found, text: parts.join('\n\n') };
}
