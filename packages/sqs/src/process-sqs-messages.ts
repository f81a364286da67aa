import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import {
  backoffDelay,
  actionFor,
  type ConsumerEventEmitter,
  InboxError,
  InboxErrorCodes,
  describeError,
  isBatchProcessor,
  type AnyInboxProcessor,
  type BackoffOptions,
  type InboxMessage,
  type InboxOutcome,
} from '@inboxed/core';
import { loadQueueInfo, redriveDestination, type QueueInfo } from './queue-info.js';
import { SqsActions, type SqsEntry } from './sqs-actions.js';
import { VisibilityHeartbeat } from './sqs-heartbeat.js';
import {
  DEFAULT_MESSAGE_ID_ATTRIBUTE,
  messageGroupId,
  receiveCount,
  sourceOf,
  toInboxMessage,
  type MappedSqsMessage,
  type MessageIdExtractor,
} from './sqs-message.js';
import { capVisibility, retryVisibilitySeconds } from './sqs-visibility.js';

/** Options of {@link processSqsMessages}; the consumer passes the same ones. */
export interface ProcessSqsMessagesOptions {
  /** The SQS client the messages were received with. */
  client: SQSClient;
  /** The queue the messages were received from. */
  queueUrl: string;
  /**
   * Where `dead-letter` and `conflict` outcomes go: the message is sent there with reason attributes,
   * then deleted. Default: none, so the message is left to the queue's redrive policy (not deleted,
   * made visible again after a backoff until `maxReceiveCount` moves it).
   */
  deadLetterQueueUrl?: string | undefined;
  /** Message attribute holding the producer's message id. Default `'message-id'`. */
  messageIdAttribute?: string | undefined;
  /** Custom message id extraction; wins over `messageIdAttribute`. */
  extractMessageId?: MessageIdExtractor | undefined;
  /**
   * Without an id (attribute or extractor), use the FIFO `MessageDeduplicationId`, else the SQS
   * `MessageId`. Default true. With false, such messages are dead-lettered (`missing-message-id`).
   */
  sqsMessageIdFallback?: boolean | undefined;
  /**
   * The visibility timeout the messages were received with, in seconds; heartbeats extend to it.
   * Default: the queue's `VisibilityTimeout` (read once with `GetQueueAttributes`).
   */
  visibilityTimeoutSeconds?: number | undefined;
  /**
   * How often running messages get their visibility extended, in ms. Default a third of the
   * visibility timeout (at least 500 ms). 0 disables heartbeats.
   */
  heartbeatIntervalMs?: number | undefined;
  /**
   * Backoff for redeliveries whose outcome carries no `retryAfterMs` (dead-letters left to the
   * redrive policy, dead-letter sends that failed), on `ApproximateReceiveCount`.
   * Default 1 s doubling to 5 min, full jitter. Capped at 12 hours.
   */
  redeliveryBackoff?: BackoffOptions | undefined;
  /** Attempts of a `DeleteMessageBatch` entry before `SQS_DELETE_FAILED` is reported. Default 3. */
  deleteAttempts?: number | undefined;
  /** When the messages were received (for SQS's 12-hour visibility limit). Default now. */
  receivedAt?: Date | undefined;
  /** FIFO processing (per `MessageGroupId`, in order). Default: the queue URL ends in `.fifo`. */
  fifo?: boolean | undefined;
  /** When aborted, messages not yet started are released (visibility 0) instead of processed. */
  signal?: AbortSignal | undefined;
  /** Where to emit outcome and error events. Default: none (read `errors` of the result). */
  events?: ConsumerEventEmitter | undefined;
}

/** What was done with a message. */
export type SqsSettlement =
  /** Acked (`processed`, `duplicate`, `rejected`) and deleted. */
  | 'deleted'
  /** Sent to the dead-letter queue and deleted. */
  | 'dead-lettered'
  /** Made visible again after the backoff (`retry`). */
  | 'retry-scheduled'
  /** Dead-letter outcome left to the redrive policy: visible again after a backoff. */
  | 'left-for-redrive'
  /** FIFO: not processed because an earlier message of its group must be retried first. */
  | 'held-back'
  /** Not processed because processing was aborted (`stop()`); made visible at once. */
  | 'released'
  /** The final action failed (see `errors`); the message reappears after its visibility timeout. */
  | 'failed';

/** One message's result. */
export interface SqsMessageResult {
  message: Message;
  /** The id the message was processed under (undefined when it had none). */
  messageId: string | undefined;
  /** The processor's (or the adapter's) outcome; undefined for held-back or released messages. */
  outcome: InboxOutcome | undefined;
  settlement: SqsSettlement;
  /** For `dead-lettered` and `left-for-redrive`: where it went. */
  destination?: string;
  /** For redeliveries: the visibility timeout set, in seconds. */
  visibilityTimeoutSeconds?: number;
}

/** The result of {@link processSqsMessages}, in input order. */
export interface SqsProcessResult {
  results: SqsMessageResult[];
  /** Every SQS failure met on the way (also emitted as `error` events when `events` was given). */
  errors: InboxError[];
}

interface Entry extends SqsEntry {
  index: number;
  id: string | undefined;
  group: string | undefined;
  mapped: MappedSqsMessage;
  result?: SqsMessageResult;
  /** The outcome is final on SQS's side (acked or dead-lettered), so its FIFO group may advance. */
  final?: boolean;
}

const DEFAULT_REDELIVERY_BACKOFF: BackoffOptions = { baseDelayMs: 1000, maxDelayMs: 300_000 };

/**
 * Processes messages you received yourself, then settles each on SQS by its outcome: acked ones
 * are deleted (`DeleteMessageBatch`, failed entries retried), `retry` ones get a visibility timeout
 * of their backoff (`ChangeMessageVisibilityBatch`), dead-letters are sent to `deadLetterQueueUrl`
 * and deleted (or left to the redrive policy). While the processor runs, a heartbeat keeps the
 * messages invisible. FIFO queues are processed per `MessageGroupId` in order, and a message that
 * must be retried holds back the rest of its group only.
 *
 * Receive with `MessageAttributeNames: ['All']` and `MessageSystemAttributeNames: ['All']` so ids,
 * receive counts and groups are available. Resolves once every message is settled; throws only
 * `SQS_QUEUE_UNAVAILABLE` when the queue's attributes are needed and cannot be read (then nothing
 * was processed).
 *
 * ```ts
 * const { Messages = [] } = await client.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10,
 *   WaitTimeSeconds: 20, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }));
 * const { results, errors } = await processSqsMessages(Messages, processor, { client, queueUrl: QueueUrl });
 * ```
 */
export async function processSqsMessages(
  messages: readonly Message[],
  processor: AnyInboxProcessor,
  options: ProcessSqsMessagesOptions,
): Promise<SqsProcessResult> {
  const errors: InboxError[] = [];
  const report = (error: InboxError) => {
    errors.push(error);
    options.events?.emit('error', error);
  };
  if (messages.length === 0) return { results: [], errors };

  const receivedAt = options.receivedAt ?? new Date();
  const needsInfo = options.visibilityTimeoutSeconds === undefined || options.deadLetterQueueUrl === undefined || options.fifo === undefined;
  const info: QueueInfo | undefined = needsInfo ? await loadQueueInfo(options.client, options.queueUrl) : undefined;
  const visibilityTimeoutSeconds = options.visibilityTimeoutSeconds ?? info?.visibilityTimeoutSeconds ?? 30;
  const fifo = options.fifo ?? info?.fifo ?? false;
  const messageIdAttribute = options.messageIdAttribute ?? DEFAULT_MESSAGE_ID_ATTRIBUTE;
  const redeliveryBackoff = options.redeliveryBackoff ?? DEFAULT_REDELIVERY_BACKOFF;
  const actions = new SqsActions(options.client, options.queueUrl, report, options.deleteAttempts ?? 3);
  const mapping = {
    messageIdAttribute,
    extractMessageId: options.extractMessageId,
    sqsIdFallback: options.sqsMessageIdFallback ?? true,
    source: sourceOf(options.queueUrl),
  };

  const entries: Entry[] = messages.map((message, index) => {
    const mapped = toInboxMessage(message, mapping, processor.consumer, receivedAt);
    return {
      message,
      index,
      id: mapped.id,
      messageId: mapped.id ?? message.MessageId ?? `#${index}`,
      group: fifo ? messageGroupId(message) : undefined,
      mapped,
    };
  });

  const heartbeatMs = options.heartbeatIntervalMs ?? Math.max(500, Math.floor((visibilityTimeoutSeconds * 1000) / 3));
  const heartbeat = new VisibilityHeartbeat(actions, visibilityTimeoutSeconds, heartbeatMs, receivedAt);
  heartbeat.start(entries);

  // FIFO: round k holds the k-th message of every group, so each group advances in order while
  // groups progress side by side; a group whose message is not final sits out the later rounds.
  const rounds = fifo ? fifoRounds(entries) : [entries];
  const blocked = new Map<string, number>();
  try {
    for (const round of rounds) {
      const runnable = round.filter((e) => e.group === undefined || !blocked.has(e.group));
      if (runnable.length === 0) continue;
      if (options.signal?.aborted) break;
      const outcomes = await runProcessor(processor, runnable);
      await settle(runnable, outcomes);
      for (const entry of runnable) {
        if (entry.group !== undefined && entry.final !== true) blocked.set(entry.group, entry.result?.visibilityTimeoutSeconds ?? 0);
      }
    }
  } finally {
    await heartbeat.stop();
  }

  // Whatever did not run goes back: behind its group's blocker (same delay, so SQS returns the
  // group in order), or at once when processing was aborted.
  const leftover = entries.filter((e) => e.result === undefined);
  if (leftover.length > 0) {
    const withSeconds = leftover.map((e) => {
      const held = e.group !== undefined && blocked.has(e.group);
      const seconds = held ? capVisibility(blocked.get(e.group!)!, receivedAt) : 0;
      e.result = { message: e.message, messageId: e.id, outcome: undefined, settlement: held ? 'held-back' : 'released', visibilityTimeoutSeconds: seconds };
      return { ...e, seconds };
    });
    await actions.changeVisibility(withSeconds, 'SQS_VISIBILITY_CHANGE_FAILED', 'returning unprocessed messages to the queue');
  }
  return { results: entries.map((e) => e.result!), errors };

  async function settle(batch: Entry[], outcomes: InboxOutcome[]): Promise<void> {
    await heartbeat.release(batch);
    const toDelete: Array<{ entry: Entry; settlement: SqsSettlement; destination?: string }> = [];
    const toDelay: Array<{ entry: Entry; seconds: number; settlement: SqsSettlement; destination?: string }> = [];
    // The backoff of a redelivery, from the outcome's retryAfterMs or the receive count; capped by SQS's 12 h per receive.
    const redelay = (entry: Entry, outcome: InboxOutcome | undefined) =>
      capVisibility(retryVisibilitySeconds(outcome, receiveCount(entry.message), redeliveryBackoff), receivedAt);

    await Promise.all(
      batch.map(async (entry, i) => {
        const outcome = outcomes[i]!;
        entry.result = { message: entry.message, messageId: entry.id, outcome, settlement: 'failed' };
        switch (actionFor(outcome.status)) {
          case 'ack':
            toDelete.push({ entry, settlement: 'deleted' });
            return;
          case 'retry':
            toDelay.push({ entry, seconds: redelay(entry, outcome), settlement: 'retry-scheduled' });
            return;
          case 'dead-letter': {
            const dlq = options.deadLetterQueueUrl;
            if (dlq === undefined) {
              toDelay.push({ entry, seconds: redelay(entry, undefined), settlement: 'left-for-redrive', destination: redriveDestination(info) });
            } else if (await actions.sendToDeadLetter(dlq, entry, outcome, messageIdAttribute)) {
              toDelete.push({ entry, settlement: 'dead-lettered', destination: dlq });
            } else {
              toDelay.push({ entry, seconds: redelay(entry, undefined), settlement: 'failed' });
            }
          }
        }
      }),
    );

    const [notDeleted, notDelayed] = await Promise.all([
      actions.delete(toDelete.map((d) => d.entry)),
      actions.changeVisibility(
        toDelay.map((d) => ({ ...d.entry, seconds: d.seconds })),
        'SQS_VISIBILITY_CHANGE_FAILED',
        'scheduling a redelivery',
      ),
    ]);
    const failedDelete = new Set(notDeleted.map((e) => e.message));
    const failedDelay = new Set(notDelayed.map((e) => e.message));
    for (const { entry, settlement, destination } of toDelete) {
      // The outcome is final even when its delete failed (reported): the redelivery will be a duplicate.
      entry.final = true;
      entry.result = { ...entry.result!, settlement: failedDelete.has(entry.message) ? 'failed' : settlement, destination };
      options.events?.emitOutcome(entry.result.outcome!, destination);
    }
    for (const { entry, seconds, settlement, destination } of toDelay) {
      entry.result = { ...entry.result!, settlement: failedDelay.has(entry.message) ? 'failed' : settlement, destination, visibilityTimeoutSeconds: seconds };
      // A dead-letter whose send failed was reported as an error and will come back: no outcome event.
      if (settlement !== 'failed') options.events?.emitOutcome(entry.result.outcome!, destination);
    }
  }
}

/** Splits FIFO messages into rounds: round k = the k-th message (in receive order) of each group. */
function fifoRounds(entries: Entry[]): Entry[][] {
  const position = new Map<string, number>();
  const rounds: Entry[][] = [];
  for (const entry of entries) {
    const key = entry.group ?? `\u0000${entry.index}`;
    const k = position.get(key) ?? 0;
    position.set(key, k + 1);
    const round = rounds[k] ?? [];
    rounds[k] = round;
    round.push(entry);
  }
  return rounds;
}

/** Runs the processor on mapped messages; adapter-decided outcomes (unparseable bodies) skip it. */
async function runProcessor(processor: AnyInboxProcessor, entries: Entry[]): Promise<InboxOutcome[]> {
  const outcomes: Array<InboxOutcome | undefined> = entries.map((e) => (e.mapped.ok ? undefined : e.mapped.outcome));
  const runnable = entries.map((e, i) => ({ e, i })).filter(({ e }) => e.mapped.ok);
  const inboxMessage = (e: Entry) => (e.mapped as { message: InboxMessage }).message;
  if (runnable.length > 0) {
    try {
      if (isBatchProcessor(processor)) {
        const result = await processor(runnable.map(({ e }) => inboxMessage(e)));
        for (const [k, { i }] of runnable.entries()) {
          outcomes[i] = result[k] ?? processorFailure(processor.consumer, entries[i]!, new Error('batch processor returned too few outcomes'));
        }
      } else {
        await Promise.all(
          runnable.map(async ({ e, i }) => {
            outcomes[i] = await processor(inboxMessage(e)).catch((error: unknown) => processorFailure(processor.consumer, e, error));
          }),
        );
      }
    } catch (error) {
      for (const { e, i } of runnable) outcomes[i] ??= processorFailure(processor.consumer, e, error);
    }
  }
  return outcomes as InboxOutcome[];
}

/** Processors never throw for a message's sake; if one does anyway, the message is retried, not lost. */
function processorFailure(consumer: string, entry: Entry, error: unknown): InboxOutcome {
  const attempt = receiveCount(entry.message) ?? 1;
  return {
    status: 'retry',
    messageId: entry.messageId,
    consumer,
    reason: 'processor-threw',
    error: new InboxError(InboxErrorCodes.HANDLER_FAILED, `the processor threw: ${describeError(error)}`, { cause: error, messageIds: [entry.messageId] }),
    attempt,
    retryAfterMs: backoffDelay(attempt),
  };
}
