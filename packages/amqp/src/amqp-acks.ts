import type { Channel, ConsumeMessage } from 'amqplib';

/** How a handler acks: one frame per delivery, or coalesced into `multiple` acks. */
export interface AckStrategy {
  /** Registers a delivery as it arrives (in delivery-tag order). */
  received(delivery: ConsumeMessage): void;
  /**
   * Positive acknowledgement of a delivery whose outcome is final. Resolves once the frame that
   * covers it was handed to the channel; rejects when the channel refused the frame (it is closed:
   * the broker redelivers).
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
 * out of order (an older one is still running) is acked on its own in the same flush: it must not
 * be reported settled while still unacked, where a connection loss would redeliver it and produce
 * a second retry or dead-letter copy; a later `multiple` ack skips it. Only for a channel this
 * consumer owns alone: `multiple` acks every older delivery on the channel, whoever consumes it.
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
  /** Removes the settled deliveries: the newest of the oldest settled run (one `multiple` ack) and those settled behind an unsettled one. */
  const takeSettled = (): { last: number | undefined; outOfOrder: number[] } => {
    let last: number | undefined;
    const outOfOrder: number[] = [];
    let inOrder = true;
    for (const [tag, done] of outstanding) {
      if (!done) inOrder = false;
      else if (inOrder) last = tag;
      else outOfOrder.push(tag);
    }
    for (const tag of outOfOrder) outstanding.delete(tag);
    if (last === undefined) return { last, outOfOrder };
    // The run ends at `last`, and a Map iterates in insertion (delivery-tag) order.
    for (const [tag] of outstanding) {
      outstanding.delete(tag);
      if (tag === last) break;
    }
    return { last, outOfOrder };
  };
  const flush = () => {
    const frame = next;
    next = undefined;
    const { last, outOfOrder } = takeSettled();
    try {
      if (last !== undefined) channel.ack({ fields: { deliveryTag: last } } as ConsumeMessage, true);
      for (const tag of outOfOrder) channel.ack({ fields: { deliveryTag: tag } } as ConsumeMessage, false);
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
