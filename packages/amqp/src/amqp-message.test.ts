import type { ConsumeMessage } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { attemptOf, extractMessageId, toInboxMessage } from './amqp-message.js';

function delivery(properties: Partial<ConsumeMessage['properties']>, content = '{"a":1}'): ConsumeMessage {
  return {
    content: Buffer.from(content),
    fields: { deliveryTag: 1, redelivered: false, exchange: '', routingKey: 'q', consumerTag: 'c' },
    properties: { headers: {}, ...properties } as ConsumeMessage['properties'],
  };
}

describe('AMQP message mapping', () => {
  it('takes the id from messageId, then x-message-id, then message-id, then the extractor', () => {
    expect(extractMessageId(delivery({ messageId: 'p', headers: { 'x-message-id': 'h' } }))).toBe('p');
    expect(extractMessageId(delivery({ headers: { 'x-message-id': 'h', 'message-id': 'm' } }))).toBe('h');
    expect(extractMessageId(delivery({ headers: { 'message-id': 42 } }))).toBe('42');
    expect(extractMessageId(delivery({ correlationId: 'c' }), (d) => d.properties.correlationId)).toBe('c');
    expect(extractMessageId(delivery({}))).toBeUndefined();
  });

  it('counts attempts from the x-inboxed-attempt header of retried copies', () => {
    expect(attemptOf(delivery({}))).toBe(1);
    expect(attemptOf(delivery({ headers: { 'x-inboxed-attempt': 2 } }))).toBe(3);
    expect(attemptOf(delivery({ headers: { 'x-inboxed-attempt': '4' } }))).toBe(5);
    expect(attemptOf(delivery({ headers: { 'x-inboxed-attempt': 'junk' } }))).toBe(1);
  });

  it('decodes JSON by content type, passes other bodies as Buffers, dead-letters broken JSON', () => {
    const context = { queue: 'q', consumer: 'c', payload: 'content-type' as const };
    const json = toInboxMessage(delivery({ messageId: 'j', contentType: 'application/json' }), context);
    expect(json).toMatchObject({ message: { id: 'j', payload: { a: 1 }, attempt: 1, source: 'amqp:q' } });
    const raw = toInboxMessage(delivery({ messageId: 'r' }, 'bytes'), context);
    expect('message' in raw && Buffer.isBuffer(raw.message.payload)).toBe(true);
    const broken = toInboxMessage(delivery({ messageId: 'b', contentType: 'application/json' }, '{'), context);
    expect(broken).toMatchObject({ outcome: { status: 'dead-letter', reason: 'unparseable-body', messageId: 'b' } });
  });
});
