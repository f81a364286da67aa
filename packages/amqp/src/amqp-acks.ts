import type { Channel, ConsumeMessage } from 'amqplib';

/** How a handler acks: one frame per delivery, or coalesced into `multiple` acks. */
export interface AckStrategy {
  /** Registers a delivery as it arrives (in delivery-tag order). */
  received(delivery: ConsumeMessage): void;
  /** Positive acknowledgement of a delivery whose outcome is final. */
  ack(delivery: ConsumeMessage): void;
  /** Returns a delivery to the queue. Always sent at once, on its own. */
  requeue(delivery: ConsumeMessage): void;
}

/** One `basic.ack` per delivery: safe on a channel shared with other consumers. */
export function individualAcks(channel: Channel): AckStrategy {
  return {
    received() {},
    ack: (delivery) => channel.ack(delivery),
    requeue: (delivery) => channel.nack(delivery, false, true),
  };
}

/**
 * Acks with `multiple` once the oldest outstanding deliveries are all settled: one frame for a
 * run of deliveries instead of one each, which matters at batch throughput. A delivery settled
 * out of order waits (unacked, never lost) until every older one is settled. Only for a channel
 * this consumer owns alone: `multiple` acks every older delivery on the channel, whoever consumes it.
 */
export function coalescedAcks(channel: Channel): AckStrategy {
  // Insertion order is delivery-tag order; `true` once the outcome is final and the ack is due.
  const outstanding = new Map<number, boolean>();
  const flush = () => {
    let last: number | undefined;
    for (const [tag, settled] of outstanding) {
      if (!settled) break;
      last = tag;
      outstanding.delete(tag);
    }
    if (last !== undefined) channel.ack({ fields: { deliveryTag: last } } as ConsumeMessage, true);
  };
  return {
    received(delivery) {
      outstanding.set(delivery.fields.deliveryTag, false);
    },
    ack(delivery) {
      outstanding.set(delivery.fields.deliveryTag, true);
      flush();
    },
    requeue(delivery) {
      // Nacked on its own, so a later `multiple` ack cannot cover it.
      channel.nack(delivery, false, true);
      outstanding.delete(delivery.fields.deliveryTag);
      flush();
    },
  };
}
