import type { AnyInboxProcessor, InboxOutcome } from '@inboxed/core';
import { actionFor, type ConsumerEventEmitter, recordDeadLetterOf, sleep } from '@inboxed/core/adapter';
import type { ConsumeMessage } from 'amqplib';
import type { AckStrategy } from './amqp-acks.js';
import { deadLetterDestination, publishDeadLetter } from './amqp-dead-letter.js';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import type { ConfirmedPublisher } from './amqp-publisher.js';
import { publishRetryCopy } from './amqp-retry.js';
import type { Topology } from './amqp-topology.js';

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
 * `requeueDelayMs`, never acked. The outcome event is emitted only once the delivery is settled.
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

  return async (entry, outcome) => {
    if (context.beforeSettle !== undefined) {
      try {
        await context.beforeSettle(outcome);
      } catch (error) {
        requeue(entry, outcome.messageId); // never left unacked, holding a prefetch slot
        throw error;
      }
    }
    const action = actionFor(outcome.status);
    if (action === 'dead-letter') {
      const notRecorded = await recordDeadLetterOf(context.processor, outcome, { destination, source: `amqp:${topology.queue}` });
      if (notRecorded !== undefined) {
        events.emit('error', notRecorded);
        await sleep(context.requeueDelayMs);
        requeue(entry, outcome.messageId);
        return;
      }
    }
    if (action !== 'ack') {
      try {
        if (action === 'retry') await publishRetryCopy(context.publisher, topology, entry.delivery, outcome, entry.id);
        else await publishDeadLetter(context.publisher, topology, entry.delivery, outcome, entry.id);
      } catch (error) {
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
}
