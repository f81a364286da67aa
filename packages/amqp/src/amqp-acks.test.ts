import type { Channel, ConsumeMessage } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { coalescedAcks } from './amqp-acks.js';

const delivery = (tag: number) => ({ fields: { deliveryTag: tag } }) as ConsumeMessage;

function recordingChannel() {
  const frames: string[] = [];
  let closed = false;
  const channel = {
    ack: (d: ConsumeMessage, multiple = false) => {
      if (closed) throw new Error('Channel closed');
      frames.push(`ack ${d.fields.deliveryTag}${multiple ? ' multiple' : ''}`);
    },
    nack: (d: ConsumeMessage) => frames.push(`nack ${d.fields.deliveryTag}`),
  } as unknown as Channel;
  return { channel, frames, close: () => (closed = true) };
}

describe('coalescedAcks', () => {
  it('acks a settled run with one multiple ack; a delivery settled behind a running one is acked on its own before its ack resolves', async () => {
    const { channel, frames } = recordingChannel();
    const acks = coalescedAcks(channel);
    for (const tag of [1, 2, 3, 4, 5]) acks.received(delivery(tag));
    await Promise.all([acks.ack(delivery(3)), acks.ack(delivery(2))]);
    // 1 is still running: 2 and 3 cannot be covered by a multiple ack, so each goes out alone, and only then counts as settled.
    expect(frames).toEqual(['ack 2', 'ack 3']);
    await acks.ack(delivery(1));
    expect(frames).toEqual(['ack 2', 'ack 3', 'ack 1 multiple']);
    acks.requeue(delivery(4)); // sent alone, at once, so no multiple ack covers it
    expect(frames).toEqual(['ack 2', 'ack 3', 'ack 1 multiple', 'nack 4']);
    await acks.ack(delivery(5));
    expect(frames).toEqual(['ack 2', 'ack 3', 'ack 1 multiple', 'nack 4', 'ack 5 multiple']);
  });

  it('in-order settling keeps one frame per turn: the run goes out as one multiple ack, what settled behind the gap one ack each', async () => {
    const { channel, frames } = recordingChannel();
    const acks = coalescedAcks(channel);
    for (let tag = 1; tag <= 10; tag++) acks.received(delivery(tag));
    // 1-4 and 6-7 settle in one turn; 5 is still running.
    await Promise.all([1, 2, 3, 4, 6, 7].map((tag) => acks.ack(delivery(tag))));
    expect(frames).toEqual(['ack 4 multiple', 'ack 6', 'ack 7']);
    await Promise.all([5, 8, 9, 10].map((tag) => acks.ack(delivery(tag))));
    expect(frames).toEqual(['ack 4 multiple', 'ack 6', 'ack 7', 'ack 10 multiple']);
  });

  it('a batch settled in one turn, each delivery by its own promise job, goes out as one frame, before any ack resolves', async () => {
    const { channel, frames } = recordingChannel();
    const acks = coalescedAcks(channel);
    const tags = Array.from({ length: 200 }, (_, i) => i + 1);
    for (const tag of tags) acks.received(delivery(tag));
    // As the delivery handler settles a batch: one reaction per delivery on the batch's outcomes.
    const outcomes = Promise.resolve();
    const framesWhenResolved: number[] = [];
    await Promise.all(tags.map((tag) => outcomes.then(() => acks.ack(delivery(tag))).then(() => framesWhenResolved.push(frames.length))));
    expect(frames).toEqual(['ack 200 multiple']);
    expect(framesWhenResolved.every((n) => n === 1)).toBe(true);
  });

  it('rejects every ack of the frame when the channel refuses it (closed), so none is reported as settled', async () => {
    const { channel, frames, close } = recordingChannel();
    const acks = coalescedAcks(channel);
    for (const tag of [1, 2, 3]) acks.received(delivery(tag));
    close();
    const results = await Promise.allSettled([1, 2, 3].map((tag) => acks.ack(delivery(tag))));
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(frames).toEqual([]);
  });
});
