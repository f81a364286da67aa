import { type AnyInboxProcessor, type InboxError, type InboxOutcome, isInboxError } from '@inboxed/core';
import { actionFor, adapterDeadLetter, type ConsumerEventEmitter, recordDeadLetterOf, sleep } from '@inboxed/core/adapter';
import type { ConsumeMessage } from 'amqplib';
import type { AckStrategy } from './amqp-acks.js';
import { deadLetterDestination, publishDeadLetter } from './amqp-dead-letter.js';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import type { ConfirmedPublisher } from './amqp-publisher.js';
import { publishRetryCopy } from './amqp-retry.js';
import type { Topology } from './amqp-topology.js';

/** Dead-letter reason of a delivery to retry whose retry copy could not be encoded: it cannot wait in a retry queue. */
export const COPY_UNENCODABLE_REASON = 'copy-unencodable';

/** The dead-letter a retry becomes when its copy cannot be encoded: with the encode error as its reason, its attempt kept. */
function unencodableRetry(outcome: InboxOutcome, error: InboxError): InboxOutcome {
  return adapterDeadLetter({ messageId: outcome.messageId, consumer: outcome.consumer, reason: COPY_UNENCODABLE_REASON, error, attempt: outcome.attempt ?? 1 });
}

/** @internal One delivery on its way to be settled. */
export interface Delivery {
  delivery: ConsumeMessage;
  /** The message id found (undefined when there was none). */
  id: string | undefined;
  /** When the consumer received it, for the outcome events' timing. */
  receivedAt: Date;
}

/** @internal What settling needs: the channel's acks, the confirm channel for copies, where copies go, where to report. */
export interface SettlementContext {
  acks: AckStrategy;
  publisher: ConfirmedPublisher;
  topology: Topology;
  /** The header the consumer reads the message id from (`messageId.header`): every copy carries the id in it. */
  messageIdHeader: string;
  events: ConsumerEventEmitter;
  /** The processor, whose `recordDeadLetter` puts every dead-letter on record before the copy is published. */
  processor: AnyInboxProcessor;
  /** Pause before requeueing a delivery whose copy could not be published (so a broken target does not hot-loop). */
  requeueDelayMs: number;
  /** Test hook between the final outcome and the settle. */
  beforeSettle?: ((outcome: InboxOutcome) => void | Promise<void>) | undefined;
}

/**
 * @internal Settles deliveries with RabbitMQ per the one outcome-to-action mapping (`actionFor`):
 * - `ack` (`processed`, `duplicate`, `rejected`): ack;
 * - `retry` (`retry`, and `busy`: another worker holds the lease, not now): publish a copy to the
 *   retry queue fitting `retryAfterMs`, wait for the broker's confirm, then ack the original: it was
 *   moved, not settled as done (a `busy` copy keeps its attempt; the event is `busy`, not `retry`);
 * - `dead-letter` (`dead-letter`, `conflict`): record it in the dead-letters table, publish a copy to
 *   the dead-letter target with reason headers, wait for the confirm, then ack.
 * A dead-letter that cannot be recorded, or a copy that is not confirmed (or is returned as unroutable), leaves the original requeued after
 * `requeueDelayMs`, never acked. A copy amqplib cannot encode even without the original headers
 * (`AMQP_COPY_UNENCODABLE`): a retry is dead-lettered instead (`copy-unencodable`), a dead-letter is
 * kept the same way, reported at most once per 30 s. The outcome event is emitted only once the delivery is settled.
 */
export function createSettlement(context: SettlementContext): (entry: Delivery, outcome: InboxOutcome) => Promise<void> {
  const { acks, events, topology } = context;
  const destination = deadLetterDestination(topology);

  /** Reports (never throws) an ack or requeue the channel refused: it is gone, and the broker redelivers. */
  const refused = (what: 'ack' | 'requeue', messageId: string, error: unknown) =>
    events.emit('error', toAmqpError(AmqpErrorCodes.ACK_FAILED, `${what} failed; the broker will redeliver`, error, { messageIds: [messageId] }));
  /** Sends an ack; false (reported) when the channel refused it. */
  const ack = async (entry: Delivery, messageId: string): Promise<boolean> => {
    try {
      await acks.ack(entry.delivery);
      return true;
    } catch (error) {
      refused('ack', messageId, error);
      return false;
    }
  };
  /** Returns a delivery to the queue at once; a refusal is reported. */
  const requeue = (entry: Delivery, messageId: string): void => {
    try {
      acks.requeue(entry.delivery);
    } catch (error) {
      refused('requeue', messageId, error);
    }
  };

  /** Records a dead-letter before its copy is sent; false (reported, requeued after the pause) when it could not be. */
  const recorded = async (entry: Delivery, outcome: InboxOutcome): Promise<boolean> => {
    const notRecorded = await recordDeadLetterOf(context.processor, outcome, { destination, source: `amqp:${topology.queue}` });
    if (notRecorded === undefined) return true;
    events.emit('error', notRecorded);
    await sleep(context.requeueDelayMs);
    requeue(entry, outcome.messageId);
    return false;
  };
  /** Publishes the retry or dead-letter copy; resolves once the broker confirmed and routed it. */
  const publishCopyOf = (entry: Delivery, outcome: InboxOutcome, action: 'retry' | 'dead-letter') =>
    action === 'retry'
      ? publishRetryCopy(context.publisher, topology, entry.delivery, outcome, entry.id, context.messageIdHeader)
      : publishDeadLetter(context.publisher, topology, entry.delivery, outcome, entry.id, context.messageIdHeader);
  /**
   * A dead-letter copy that cannot be encoded even without the original headers: the message is
   * kept (requeued after the pause, never acked, never rejected: inboxed cannot see whether the
   * queue has a dead-letter exchange of its own, and without one a reject would drop it), and
   * reported at most once per 30 s, since it comes back and fails the same way.
   */
  const keepUnencodable = async (entry: Delivery, outcome: InboxOutcome, error: InboxError): Promise<void> => {
    events.reportRecurring(
      AmqpErrorCodes.COPY_UNENCODABLE,
      toAmqpError(
        AmqpErrorCodes.COPY_UNENCODABLE,
        `the dead-letter copy cannot be encoded even without the original headers; the original is kept in ${topology.queue} (requeued)`,
        error,
        { messageIds: [outcome.messageId], details: { queue: topology.queue } },
      ),
    );
    await sleep(context.requeueDelayMs);
    requeue(entry, outcome.messageId);
  };

  /** Settles one delivery per its outcome; a retry whose copy cannot be encoded is settled again as a dead-letter. */
  const settleAs = async (entry: Delivery, outcome: InboxOutcome): Promise<void> => {
    const action = actionFor(outcome.status);
    if (action === 'dead-letter' && !(await recorded(entry, outcome))) return;
    if (action !== 'ack') {
      try {
        await publishCopyOf(entry, outcome, action);
      } catch (error) {
        if (isInboxError(error) && error.code === AmqpErrorCodes.COPY_UNENCODABLE) {
          if (action === 'retry') return settleAs(entry, unencodableRetry(outcome, error));
          return keepUnencodable(entry, outcome, error);
        }
        events.emit(
          'error',
          toAmqpError(AmqpErrorCodes.PUBLISH_FAILED, `could not publish the ${action} copy; the original is requeued`, error, {
            messageIds: [outcome.messageId],
          }),
        );
        await sleep(context.requeueDelayMs);
        requeue(entry, outcome.messageId);
        return;
      }
    }
    if (await ack(entry, outcome.messageId)) events.emitOutcome(outcome, entry.receivedAt, destination);
  };

  return async (entry, outcome) => {
    if (context.beforeSettle !== undefined) {
      try {
        await context.beforeSettle(outcome);
      } catch (error) {
        requeue(entry, outcome.messageId); // never left unacked, holding a prefetch slot
        throw error;
      }
    }
    await settleAs(entry, outcome);
  };
}
