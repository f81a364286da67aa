import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  SendMessageCommand,
  type BatchResultErrorEntry,
  type Message,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { backoffDelay, sleep, type InboxError, type InboxOutcome } from '@inboxed/core';
import { deadLetterAttributes, isFifoQueueUrl } from './sqs-dead-letter.js';
import { isPermanentEntryFailure, SqsErrorCodes, toSqsError, type SqsBatchFailure } from './sqs-errors.js';

/** One received message and the id it is known by (for errors and logs). */
export interface SqsEntry {
  message: Message;
  messageId: string;
}

const BATCH_LIMIT = 10;

function chunks<T>(items: readonly T[], size = BATCH_LIMIT): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

function failureOf(entry: SqsEntry, failed: BatchResultErrorEntry | undefined, thrown?: unknown): SqsBatchFailure {
  if (failed !== undefined) {
    return { messageId: entry.messageId, code: failed.Code ?? 'Unknown', message: failed.Message ?? '', senderFault: failed.SenderFault ?? false };
  }
  const error = thrown as { name?: string; message?: string; $fault?: string } | undefined;
  return { messageId: entry.messageId, code: error?.name ?? 'Error', message: error?.message ?? String(thrown), senderFault: error?.$fault === 'client' };
}

/**
 * The SQS calls that settle messages, batched 10 at a time. Per-entry failures of a batch call are
 * retried (a receipt handle SQS calls invalid is not), and whatever still fails is reported as an
 * error naming the message ids: never dropped silently.
 */
export class SqsActions {
  constructor(
    private readonly client: SQSClient,
    private readonly queueUrl: string,
    private readonly report: (error: InboxError) => void,
    private readonly deleteAttempts: number,
  ) {}

  /** Deletes messages with `DeleteMessageBatch`. Resolves with the entries that could not be deleted. */
  async delete(entries: readonly SqsEntry[]): Promise<SqsEntry[]> {
    const results = await Promise.all(chunks(entries).map((chunk) => this.deleteChunk(chunk)));
    return results.flat();
  }

  private async deleteChunk(chunk: SqsEntry[]): Promise<SqsEntry[]> {
    let pending = chunk;
    let failures: SqsBatchFailure[] = [];
    const rejected: SqsEntry[] = [];
    for (let attempt = 1; pending.length > 0 && attempt <= this.deleteAttempts; attempt++) {
      if (attempt > 1) await sleep(backoffDelay(attempt - 1, { baseDelayMs: 200, maxDelayMs: 2000, jitter: 'equal' }));
      const byId = new Map(pending.map((entry, i) => [`m${i}`, entry]));
      failures = [];
      let retryable: SqsEntry[] = [];
      try {
        const result = await this.client.send(
          new DeleteMessageBatchCommand({ QueueUrl: this.queueUrl, Entries: [...byId].map(([Id, e]) => ({ Id, ReceiptHandle: e.message.ReceiptHandle })) }),
        );
        for (const failed of result.Failed ?? []) {
          const entry = byId.get(failed.Id ?? '');
          if (entry === undefined) continue;
          const failure = failureOf(entry, failed);
          failures.push(failure);
          if (!isPermanentEntryFailure(failure)) retryable.push(entry);
        }
      } catch (error) {
        failures = pending.map((entry) => failureOf(entry, undefined, error));
        retryable = pending;
      }
      const permanent = failures.filter(isPermanentEntryFailure);
      rejected.push(...pending.filter((entry) => !retryable.includes(entry) && permanent.some((f) => f.messageId === entry.messageId)));
      if (permanent.length > 0) {
        this.reportDeleteFailure(permanent, 'SQS rejected the receipt handle');
        failures = failures.filter((f) => !isPermanentEntryFailure(f));
      }
      pending = retryable;
    }
    if (failures.length > 0) this.reportDeleteFailure(failures, `delete failed after ${this.deleteAttempts} attempts`);
    return [...rejected, ...pending];
  }

  private reportDeleteFailure(failures: SqsBatchFailure[], why: string): void {
    this.report(
      toSqsError(
        SqsErrorCodes.DELETE_FAILED,
        `${why} for ${failures.length} message(s) whose outcome is final; they reappear after their visibility timeout and are then acked as duplicates (${failures.map((f) => `${f.code}: ${f.message}`).join('; ')})`,
        undefined,
        { messageIds: failures.map((f) => f.messageId), details: { queueUrl: this.queueUrl, failures } },
      ),
    );
  }

  /**
   * Sets each message's visibility timeout (seconds from now) with `ChangeMessageVisibilityBatch`.
   * A failure is reported with `code` and otherwise harmless: the message reappears when its
   * current visibility lapses. Resolves with the entries that failed.
   */
  async changeVisibility(
    entries: ReadonlyArray<SqsEntry & { seconds: number }>,
    code: typeof SqsErrorCodes.VISIBILITY_CHANGE_FAILED | typeof SqsErrorCodes.HEARTBEAT_FAILED,
    what: string,
  ): Promise<SqsEntry[]> {
    const failedAll: SqsEntry[] = [];
    await Promise.all(
      chunks(entries).map(async (chunk) => {
        const byId = new Map(chunk.map((entry, i) => [`m${i}`, entry]));
        const failures: SqsBatchFailure[] = [];
        let thrown: unknown;
        try {
          const result = await this.client.send(
            new ChangeMessageVisibilityBatchCommand({
              QueueUrl: this.queueUrl,
              Entries: [...byId].map(([Id, e]) => ({ Id, ReceiptHandle: e.message.ReceiptHandle, VisibilityTimeout: e.seconds })),
            }),
          );
          for (const failed of result.Failed ?? []) {
            const entry = byId.get(failed.Id ?? '');
            if (entry === undefined) continue;
            failures.push(failureOf(entry, failed));
            failedAll.push(entry);
          }
        } catch (error) {
          thrown = error;
          for (const entry of chunk) {
            failures.push(failureOf(entry, undefined, error));
            failedAll.push(entry);
          }
        }
        if (failures.length > 0) {
          this.report(
            toSqsError(code, `${what} failed for ${failures.length} message(s) (${failures.map((f) => `${f.code}: ${f.message}`).join('; ')})`, thrown, {
              messageIds: failures.map((f) => f.messageId),
              details: { queueUrl: this.queueUrl, failures },
            }),
          );
        }
      }),
    );
    return failedAll;
  }

  /**
   * Sends a copy of the message to the dead-letter queue: same body, reason attributes and the
   * original message id. For a FIFO DLQ the original group is kept and the SQS `MessageId` is the
   * deduplication id, so a dead-letter repeated after a failed delete is not stored twice.
   * Resolves false (after reporting) when the send failed.
   */
  async sendToDeadLetter(
    deadLetterQueueUrl: string,
    entry: SqsEntry & { id: string | undefined },
    outcome: InboxOutcome,
    messageIdAttribute: string,
  ): Promise<boolean> {
    const { message } = entry;
    const fifo = isFifoQueueUrl(deadLetterQueueUrl);
    try {
      await this.client.send(
        new SendMessageCommand({
          QueueUrl: deadLetterQueueUrl,
          MessageBody: message.Body ?? '',
          MessageAttributes: deadLetterAttributes(outcome, message, { queueUrl: this.queueUrl, messageIdAttribute, messageId: entry.id }),
          ...(fifo
            ? {
                MessageGroupId: message.Attributes?.MessageGroupId ?? 'inboxed-dead-letters',
                MessageDeduplicationId: message.MessageId ?? message.Attributes?.MessageDeduplicationId,
              }
            : {}),
        }),
      );
      return true;
    } catch (error) {
      this.report(
        toSqsError(
          SqsErrorCodes.DEAD_LETTER_FAILED,
          `could not send message ${entry.messageId} to the dead-letter queue; it is kept and comes back after a backoff`,
          error,
          {
            messageIds: [entry.messageId],
            details: { queueUrl: this.queueUrl, deadLetterQueueUrl, reason: outcome.reason },
          },
        ),
      );
      return false;
    }
  }
}
