import { type RepairResult, releaseMessage, requeueMessage } from '@inboxed/core/admin';
import type { CommandContext } from '../context.js';
import { ExitCodes } from '../exit-codes.js';
import { type CommandOutput, escapeText, quote } from '../output.js';

function describe(result: RepairResult, verb: string): string {
  return [
    `${verb} ${quote(result.messageId)} of ${quote(result.consumer)}:`,
    ...result.changes.map((change) => `  - ${escapeText(change)}`),
    `Audit #${result.audit.id} by ${escapeText(result.audit.actor)}: ${escapeText(result.audit.reason ?? '')}`,
  ].join('\n');
}

/**
 * `inboxed release <consumer> <message-id> --reason <text>`: frees a stuck leased claim and/or
 * clears the attempts record. Never marks anything succeeded; refuses completed messages.
 */
export async function releaseCommand(context: CommandContext, consumer: string, messageId: string, options: { reason: string }): Promise<CommandOutput> {
  const result = await releaseMessage(context.db, context.names, consumer, messageId, { reason: options.reason, actor: context.actor });
  return { exitCode: ExitCodes.OK, json: result, text: describe(result, 'Released') };
}

/**
 * `inboxed requeue <consumer> <message-id> --reason <text>`: a fresh retry budget (the attempts
 * record deleted). Replaying the message is done with the broker's tools.
 */
export async function requeueCommand(context: CommandContext, consumer: string, messageId: string, options: { reason: string }): Promise<CommandOutput> {
  const result = await requeueMessage(context.db, context.names, consumer, messageId, { reason: options.reason, actor: context.actor });
  return {
    exitCode: ExitCodes.OK,
    json: result,
    text: `${describe(result, 'Requeued')}\nReplay the message from the dead-letter destination with the broker's tools (shovel, kcat, SQS redrive).`,
  };
}
