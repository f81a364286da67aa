import type { Channel, ConsumeMessage } from 'amqplib';

/** How a handler acks: one frame per delivery, or coalesced into `multiple` acks. */
export interface AckStrategy {
  /** Registers a delivery as it arrives (in delivery-tag order). */
  received(delivery: ConsumeMessage): void;
  /**
   * Positive acknowledgement of a delivery whose outcome is final. Resolves once the frame that
   * covers it was handed to the channel (or, for a delivery settled ahead of an older one, once it
   * waits for that one); rejects when the channel refused the frame (it is closed: the broker
   * redelivers).
   */
  ack(delivery: ConsumeMessage): Promise<void>;
  /** Returns a delivery to the queue. Always sent at once, on its own. */
  requeue(delivery: ConsumeMessage): void;
}

/** One `basic.ack` per delivery: safe on a channel shared with other consumers. */
export function individualAcks(channel: Channel): AckStrategy {
  return {
    received() {},
    ack: async (delivery) => channel.ack(delivery),
    requeue: (delivery) => channel.nack(delivery, false, true),
  };
}

/**
 * Acks with `multiple` once the oldest outstanding deliveries are all settled: one frame for a
 * run of deliveries instead of one each, which matters at batch throughput. A delivery settled
 * out of order waits (unacked, never lost) until every older one is settled. Only for a channel
 * this consumer owns alone: `multiple` acks every older delivery on the channel, whoever consumes it.
 *
 * A batch's deliveries are settled one after another in the same turn of the event loop, each by
 * its own promise job, so the frame goes out in a microtask queued by the first of them, after
 * the rest: the whole batch in one frame. Sending on every ack instead sent one `multiple` ack per
 * delivery (each covering only itself, as every older one was already acked), which cost RabbitMQ
 * and this process a frame and a socket write per message.
 */
export function coalescedAcks(channel: Channel): AckStrategy {
  // Insertion order is delivery-tag order; `true` once the outcome is final and the ack is due.
  const outstanding = new Map<number, boolean>();
  /** The next frame, shared by every ack settled since the last one; set while a flush is queued. */
  let next: { promise: Promise<void>; resolve: () => void; reject: (error: unknown) => void } | undefined;
  const flush = () => {
    const frame = next;
    next = undefined;
    let last: number | undefined;
    for (const [tag, done] of outstanding) {
      if (!done) break;
      last = tag;
      outstanding.delete(tag);
    }
    try {
      if (last !== undefined) channel.ack({ fields: { deliveryTag: last } } as ConsumeMessage, true);
    } catch (error) {
      frame?.reject(error);
      return;
    }
    frame?.resolve();
  };
  return {
    received(delivery) {
      outstanding.set(delivery.fields.deliveryTag, false);
    },
    ack(delivery) {
      outstanding.set(delivery.fields.deliveryTag, true);
      if (next === undefined) {
        let resolve!: () => void;
        let reject!: (error: unknown) => void;
        const promise = new Promise<void>((res, rej) => {
          resolve = res;
          reject = rej;
        });
        next = { promise, resolve, reject };
        queueMicrotask(flush);
      }
      return next.promise;
    },
    requeue(delivery) {
      // Nacked on its own, so a later `multiple` ack cannot cover it.
      channel.nack(delivery, false, true);
      outstanding.delete(delivery.fields.deliveryTag);
      flush();
    },
  };
}
