import { ChangeMessageVisibilityBatchCommand, DeleteMessageBatchCommand, type Message, type SQSClient } from '@aws-sdk/client-sqs';
import type { InboxError } from '@inboxed/core';
import { backoffDelay, sleep } from '@inboxed/core/adapter';
import { callWithTimeout, SQS_CALL_TIMEOUT_MS } from './sqs-call.js';
import { batchFailure, describeFailures, isPermanentEntryFailure, SqsErrorCodes, toSqsError, type SqsBatchFailure } from './sqs-errors.js';

/** One received message and the id it is known by (for errors and logs). */
export interface SqsEntry {
  message: Message;
  messageId: string;
}

/** SQS's limit of entries per batch call. */
const BATCH_LIMIT = 10;

function chunks<T>(items: readonly T[], size = BATCH_LIMIT): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/**
 * The SQS batch calls that settle received messages, 10 entries at a time. Per-entry failures of a
 * delete are retried (a receipt handle SQS calls invalid is not), and whatever still fails is
 * reported as an error naming the message ids: never dropped silently.
 */
export class SqsBatchCalls {
  constructor(
    private readonly client: SQSClient,
    private readonly queueUrl: string,
    private readonly report: (error: InboxError) => void,
    private readonly deleteAttempts: number,
  ) {}

  /** Deletes messages with `DeleteMessageBatch`. Resolves with the entries that could not be deleted (reported). */
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
        const command = new DeleteMessageBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: [...byId].map(([Id, e]) => ({ Id, ReceiptHandle: e.message.ReceiptHandle })),
        });
        const result = await callWithTimeout('DeleteMessageBatch', SQS_CALL_TIMEOUT_MS, (abortSignal) => this.client.send(command, { abortSignal }));
        for (const failed of result.Failed ?? []) {
          const entry = byId.get(failed.Id ?? '');
          if (entry === undefined) continue;
          const failure = batchFailure(entry.messageId, failed);
          if (isPermanentEntryFailure(failure)) {
            rejected.push(entry);
            this.reportDeleteFailure([failure], 'SQS rejected the receipt handle');
          } else {
            failures.push(failure);
            retryable.push(entry);
          }
        }
      } catch (error) {
        failures = pending.map((entry) => batchFailure(entry.messageId, undefined, error));
        retryable = pending;
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
        `${why} for ${failures.length} message(s) whose outcome is final; they reappear after their visibility timeout and are then acked as duplicates (${describeFailures(failures)})`,
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
          const command = new ChangeMessageVisibilityBatchCommand({
            QueueUrl: this.queueUrl,
            Entries: [...byId].map(([Id, e]) => ({ Id, ReceiptHandle: e.message.ReceiptHandle, VisibilityTimeout: e.seconds })),
          });
          const result = await callWithTimeout('ChangeMessageVisibilityBatch', SQS_CALL_TIMEOUT_MS, (abortSignal) =>
            this.client.send(command, { abortSignal }),
          );
          for (const failed of result.Failed ?? []) {
            const entry = byId.get(failed.Id ?? '');
            if (entry === undefined) continue;
            failures.push(batchFailure(entry.messageId, failed));
            failedAll.push(entry);
          }
        } catch (error) {
          thrown = error;
          for (const entry of chunk) {
            failures.push(batchFailure(entry.messageId, undefined, error));
            failedAll.push(entry);
          }
        }
        if (failures.length > 0) {
          this.report(
            toSqsError(code, `${what} failed for ${failures.length} message(s) (${describeFailures(failures)})`, thrown, {
              messageIds: failures.map((f) => f.messageId),
              details: { queueUrl: this.queueUrl, failures },
            }),
          );
        }
      }),
    );
    return failedAll;
  }
}
