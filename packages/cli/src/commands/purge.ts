import { auditedPurge, inboxStatus, previewPurge } from '@inboxed/core/admin';
import type { CommandContext } from '../context.js';
import { formatDuration } from '../duration.js';
import { ExitCodes } from '../exit-codes.js';
import { type CommandOutput, escapeText, quote } from '../output.js';

/** Options of `inboxed purge`. */
export interface PurgeCommandOptions {
  olderThanMs: number;
  consumer?: string;
  batchSize?: number;
  dryRun?: boolean;
  reason?: string;
}

/**
 * `inboxed purge --older-than 7d [--consumer c] [--batch-size n] [--dry-run]`: core's `purgeInbox`,
 * audited; `--dry-run` counts what it would delete with the same predicate.
 */
export async function purgeCommand(context: CommandContext, options: PurgeCommandOptions): Promise<CommandOutput> {
  const scope = { olderThanMs: options.olderThanMs, ...(options.consumer === undefined ? {} : { consumer: options.consumer }) };
  if (options.consumer !== undefined) await inboxStatus(context.db, context.names, { consumer: options.consumer, failingLimit: 0 });
  const window = `older than ${formatDuration(options.olderThanMs)}${options.consumer === undefined ? '' : ` of ${quote(options.consumer)}`}`;
  if (options.dryRun === true) {
    const wouldDelete = await previewPurge(context.db, context.names, scope);
    return {
      exitCode: ExitCodes.OK,
      json: { dryRun: true, olderThanMs: options.olderThanMs, consumer: options.consumer ?? null, wouldDelete },
      text: `Dry run: would delete ${wouldDelete.inbox} inbox row(s) and ${wouldDelete.attempts} attempts record(s) ${window}. Nothing was deleted.`,
    };
  }
  const result = await auditedPurge(context.db, context.names, {
    ...scope,
    actor: context.actor,
    ...(options.batchSize === undefined ? {} : { batchSize: options.batchSize }),
    ...(options.reason === undefined ? {} : { reason: options.reason }),
  });
  return {
    exitCode: ExitCodes.OK,
    json: {
      dryRun: false,
      olderThanMs: options.olderThanMs,
      consumer: options.consumer ?? null,
      deleted: result.deleted,
      attemptsDeleted: result.attemptsDeleted,
      audit: result.audit,
    },
    text: `Deleted ${result.deleted} inbox row(s) and ${result.attemptsDeleted} attempts record(s) ${window}. Audit #${result.audit.id} by ${escapeText(result.audit.actor)}.`,
  };
}
