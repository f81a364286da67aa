import type { Channel, ConsumeMessage } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { coalescedAcks } from './amqp-acks.js';

const delivery = (tag: number) => ({ fields: { deliveryTag: tag } }) as ConsumeMessage;

function recordingChannel() {
  const frames: string[] = [];
  const channel = {
    ack: (d: ConsumeMessage, multiple = false) => frames.push(`ack ${d.fields.deliveryTag}${multiple ? ' multiple' : ''}`),
    nack: (d: ConsumeMessage) => frames.push(`nack ${d.fields.deliveryTag}`),
  } as unknown as Channel;
  return { channel, frames };
}

describe('coalescedAcks', () => {
  it('acks a settled run with one multiple ack, and holds later ones until older ones settle', () => {
    const { channel, frames } = recordingChannel();
    const acks = coalescedAcks(channel);
    for (const tag of [1, 2, 3, 4, 5]) acks.received(delivery(tag));
    acks.ack(delivery(3));
    acks.ack(delivery(2));
    expect(frames).toEqual([]); // 1 is still running: 2 and 3 wait, unacked
    acks.ack(delivery(1));
    expect(frames).toEqual(['ack 3 multiple']);
    acks.requeue(delivery(4)); // sent alone, at once, so no multiple ack covers it
    acks.ack(delivery(5));
    expect(frames).toEqual(['ack 3 multiple', 'nack 4', 'ack 5 multiple']);
  });
});
