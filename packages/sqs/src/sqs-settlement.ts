import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import { type AnyInboxProcessor, describeError, type InboxError, type InboxOutcome } from '@inboxed/core';
import { actionFor, type BackoffOptions, type ConsumerEventEmitter, recordDeadLetterOf } from '@inboxed/core/adapter';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';
import type { SqsBatchCalls, SqsEntry } from './sqs-batch-calls.js';
import { sendToDeadLetter } from './sqs-dead-letter.js';
import { type MappedSqsMessage, receiveCount } from './sqs-message.js';
import { capVisibility, retryVisibilitySeconds } from './sqs-visibility.js';

/** What was done with a message. */
export type SqsSettlement =
  /** Acked (`processed`, `duplicate`, `rejected`) and deleted. */
  | 'deleted'
  /** Sent to the dead-letter queue and deleted. */
  | 'dead-lettered'
  /** Made visible again after the backoff (`retry`), or after what is left of another worker's lease (`busy`). */
  | 'retry-scheduled'
  /** Dead-letter outcome left to the redrive policy (no `deadLetterQueueUrl`): visible again after a backoff. */
  | 'left-for-redrive'
  /** FIFO: not processed because an earlier message of its group must be retried first. */
  | 'held-back'
  /** Not processed because processing was stopped; made visible at once. */
  | 'released'
  /** The final SQS call failed (reported as an `error`); the message reappears after its visibility timeout. */
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

/** A received message on its way through processing and settlement. */
export interface ReceivedEntry extends SqsEntry {
  index: number;
  id: string | undefined;
  group: string | undefined;
  mapped: MappedSqsMessage;
  result?: SqsMessageResult;
  /** The outcome is final on SQS's side (acked or dead-lettered), so its FIFO group may advance. */
  final?: boolean;
}

/** What settling needs, fixed for one receive. */
export interface SettlementContext {
  client: SQSClient;
  queueUrl: string;
  calls: SqsBatchCalls;
  deadLetterQueueUrl: string | undefined;
  /** The `dead_letter` destination when dead-letters are left to the queue's redrive policy. */
  redriveDestination: string;
  messageIdAttribute: string;
  redeliveryBackoff: BackoffOptions;
  receivedAt: Date;
  events: ConsumerEventEmitter;
  /** The processor, whose `recordDeadLetter` puts every dead-letter on record before its copy is sent. */
  processor: AnyInboxProcessor;
  report(error: InboxError): void;
  beforeSettle: ((outcome: InboxOutcome) => void | Promise<void>) | undefined;
}

interface Planned {
  entry: ReceivedEntry;
  outcome: InboxOutcome;
  settlement: SqsSettlement;
  destination?: string;
}

/**
 * Settles entries by their outcomes (`actionFor`): acks are deleted (`DeleteMessageBatch`), retries
 * get a visibility timeout of their backoff (`ChangeMessageVisibilityBatch`) and `busy` ones of their
 * own `retryAfterMs` (never deleted or dead-lettered; not final, so a FIFO group waits), dead-letters
 * are sent to the DLQ and deleted only once the copy was stored (or, without a DLQ URL, left to the
 * redrive policy after a backoff). An outcome event is emitted only once its SQS call succeeded.
 */
export async function settle(entries: readonly ReceivedEntry[], outcomes: readonly (InboxOutcome | undefined)[], ctx: SettlementContext): Promise<void> {
  if (ctx.beforeSettle !== undefined)
    await runBeforeSettle(
      outcomes.filter((o) => o !== undefined),
      ctx,
    );
  const toDelete: Planned[] = [];
  // An undefined outcome: the entry could not be settled by one, and is redelivered after a backoff.
  const toDelay: Array<Omit<Planned, 'outcome'> & { outcome: InboxOutcome | undefined; seconds: number }> = [];
  const redelay = (entry: ReceivedEntry, outcome: InboxOutcome | undefined) =>
    capVisibility(retryVisibilitySeconds(outcome, receiveCount(entry.message), ctx.redeliveryBackoff), ctx.receivedAt);

  /**
   * Plans one entry by its outcome. One without an outcome (its processor call failed; reported
   * then), or whose planning throws where nothing should (a bug in a middleware, a hook or
   * inboxed; reported here), is redelivered after a backoff like a failed dead-letter. Either way
   * the other entries of the receive are still settled by their own outcomes.
   */
  const plan = async (entry: ReceivedEntry, outcome: InboxOutcome | undefined): Promise<void> => {
    entry.result = { message: entry.message, messageId: entry.id, outcome, settlement: 'failed' };
    if (outcome === undefined) {
      toDelay.push({ entry, outcome: undefined, settlement: 'failed', seconds: redelay(entry, undefined) });
      return;
    }
    try {
      await planOutcome(entry, outcome);
    } catch (error) {
      const seconds = redelay(entry, undefined);
      ctx.report(
        toSqsError(
          SqsErrorCodes.SETTLE_FAILED,
          `settling message ${entry.messageId} threw unexpectedly (not an SQS failure); it is not deleted and is redelivered in ${seconds} s`,
          error,
          { messageIds: [entry.messageId] },
        ),
      );
      toDelay.push({ entry, outcome: undefined, settlement: 'failed', seconds });
    }
  };
  const planOutcome = async (entry: ReceivedEntry, outcome: InboxOutcome): Promise<void> => {
    switch (actionFor(outcome.status)) {
      case 'ack':
        toDelete.push({ entry, outcome, settlement: 'deleted' });
        return;
      case 'retry': // `retry`, and `busy` (its visibility is its own retryAfterMs; see retryVisibilitySeconds)
        toDelay.push({ entry, outcome, settlement: 'retry-scheduled', seconds: redelay(entry, outcome) });
        return;
      case 'dead-letter': {
        const dlq = ctx.deadLetterQueueUrl;
        const notRecorded = await recordDeadLetterOf(ctx.processor, outcome, { destination: dlq ?? ctx.redriveDestination, source: `sqs:${ctx.queueUrl}` });
        if (notRecorded !== undefined) {
          ctx.report(notRecorded);
          toDelay.push({ entry, outcome, settlement: 'failed', seconds: redelay(entry, undefined) });
          return;
        }
        if (dlq === undefined) {
          toDelay.push({ entry, outcome, settlement: 'left-for-redrive', destination: ctx.redriveDestination, seconds: redelay(entry, undefined) });
          return;
        }
        const failed = await sendToDeadLetter(ctx.client, dlq, entry, outcome, {
          queueUrl: ctx.queueUrl,
          messageIdAttribute: ctx.messageIdAttribute,
          messageId: entry.id,
        });
        if (failed === undefined) {
          toDelete.push({ entry, outcome, settlement: 'dead-lettered', destination: dlq });
        } else {
          ctx.report(failed);
          toDelay.push({ entry, outcome, settlement: 'failed', seconds: redelay(entry, undefined) });
        }
        return;
      }
      default:
        throw new Error(`no settlement for the outcome status ${JSON.stringify(outcome.status)}`);
    }
  };
  await Promise.all(entries.map((entry, i) => plan(entry, outcomes[i])));

  const [notDeleted, notDelayed] = await Promise.all([
    ctx.calls.delete(toDelete.map((d) => d.entry)),
    ctx.calls.changeVisibility(
      toDelay.map((d) => ({ ...d.entry, seconds: d.seconds })),
      SqsErrorCodes.VISIBILITY_CHANGE_FAILED,
      'scheduling a redelivery',
    ),
  ]);
  const failedDelete = new Set(notDeleted.map((e) => e.message));
  const failedDelay = new Set(notDelayed.map((e) => e.message));
  for (const { entry, outcome, settlement, destination } of toDelete) {
    // Final even when its delete failed (reported): the redelivery is a duplicate, so a FIFO group may move on.
    entry.final = true;
    const deleted = !failedDelete.has(entry.message);
    entry.result = { ...entry.result!, settlement: deleted ? settlement : 'failed', ...(destination === undefined ? {} : { destination }) };
    if (deleted) emitOutcome(ctx, entry, outcome, destination);
  }
  for (const { entry, outcome, settlement, destination, seconds } of toDelay) {
    const delayed = !failedDelay.has(entry.message);
    entry.result = {
      ...entry.result!,
      settlement: delayed ? settlement : 'failed',
      visibilityTimeoutSeconds: seconds,
      ...(destination === undefined ? {} : { destination }),
    };
    // A dead-letter whose send failed was reported as an error and comes back: no outcome event.
    if (delayed && settlement !== 'failed' && outcome !== undefined) emitOutcome(ctx, entry, outcome, destination);
  }
}

/** The outcome event of a settled entry; a throw there (where nothing should throw) is reported, and the other entries still get theirs. */
function emitOutcome(ctx: SettlementContext, entry: ReceivedEntry, outcome: InboxOutcome, destination: string | undefined): void {
  try {
    ctx.events.emitOutcome(outcome, ctx.receivedAt, destination);
  } catch (error) {
    ctx.report(
      toSqsError(
        SqsErrorCodes.SETTLE_FAILED,
        `emitting the outcome event of message ${entry.messageId} threw unexpectedly; it was settled (${entry.result?.settlement})`,
        error,
        {
          messageIds: [entry.messageId],
        },
      ),
    );
  }
}

/** The test hook between commit and settle; a hook that throws is logged, never allowed to lose a message. */
async function runBeforeSettle(outcomes: readonly InboxOutcome[], ctx: SettlementContext): Promise<void> {
  await Promise.all(
    outcomes.map(async (outcome) => {
      try {
        await ctx.beforeSettle!(outcome);
      } catch (error) {
        ctx.events.logger.warn({ err: error, messageId: outcome.messageId }, `beforeSettle threw: ${describeError(error)}`);
      }
    }),
  );
}
