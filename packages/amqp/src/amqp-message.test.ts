import type { ConsumeMessage } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { attemptOf, extractMessageId, mapDelivery, resolveMessageId } from './amqp-message.js';
import { retriedAttempt } from './amqp-retry.js';

function delivery(properties: Partial<ConsumeMessage['properties']>, content = '{"a":1}'): ConsumeMessage {
  return {
    content: Buffer.from(content),
    fields: { deliveryTag: 1, redelivered: false, exchange: '', routingKey: 'q', consumerTag: 'c' },
    properties: { headers: {}, ...properties } as ConsumeMessage['properties'],
  };
}

const defaults = resolveMessageId(undefined);
const context = { queue: 'q', consumer: 'c', payload: 'content-type' as const, messageId: defaults };
const now = new Date();

describe('AMQP message mapping', () => {
  it('finds the id in the contract order: extract, then the header (default message-id), then properties.messageId', () => {
    expect(extractMessageId(delivery({ messageId: 'p', headers: { 'message-id': 'h' } }), defaults)).toBe('h');
    expect(extractMessageId(delivery({ messageId: 'p' }), defaults)).toBe('p');
    expect(extractMessageId(delivery({ headers: { 'message-id': 42 } }), defaults)).toBe('42');
    expect(extractMessageId(delivery({ headers: { 'message-id': Buffer.from('b') } }), defaults)).toBe('b');
    const custom = resolveMessageId({ header: 'x-id', extract: (d) => d.properties.correlationId as string | undefined });
    expect(extractMessageId(delivery({ correlationId: 'c', headers: { 'x-id': 'h' } }), custom)).toBe('c');
    expect(extractMessageId(delivery({ headers: { 'x-id': 'h', 'message-id': 'ignored' } }), custom)).toBe('h');
    expect(extractMessageId(delivery({}), defaults)).toBeUndefined();
  });

  it('reads an id exactly or refuses it: two different ids never become one', () => {
    const refused = (headers: Record<string, unknown>) =>
      expect(mapDelivery(delivery({ headers }), context, now)).toMatchObject({
        outcome: { status: 'dead-letter', reason: 'invalid-message-id', error: { code: 'INVALID_MESSAGE_ID' } },
      });
    // Malformed UTF-8 would decode to U+FFFD: ff 41 and fe 41 would both be "\uFFFDA".
    refused({ 'message-id': Buffer.from([0xff, 0x41]) });
    refused({ 'message-id': Buffer.from([0xfe, 0x41]) });
    // amqplib decodes a 64-bit integer to a double: past 2^53 the last digits are already gone.
    refused({ 'message-id': Number(1541815603606036480n) });
    refused({ 'message-id': 1.5 });
    refused({ 'message-id': true });
    refused({ 'message-id': ['a'] });
    refused({ 'message-id': { nested: 'table' } });
    expect(extractMessageId(delivery({ headers: { 'message-id': Number.MAX_SAFE_INTEGER } }), defaults)).toBe('9007199254740991');
    expect(extractMessageId(delivery({ headers: { 'message-id': Buffer.from('évé-1') } }), defaults)).toBe('évé-1');
    // amqplib decodes a table-valued __proto__ header by assigning obj.__proto__: the table becomes the
    // headers' prototype, and must not answer for the message-id header the message lacks.
    const polluted = Object.setPrototypeOf({}, { 'message-id': 'from-prototype' });
    expect(extractMessageId(delivery({ headers: polluted, messageId: 'real' }), defaults)).toBe('real');
  });

  it('refuses fallback: RabbitMQ has no per-message id of its own', () => {
    expect(() => resolveMessageId({ fallback: true })).toThrow(/fallback is not supported/);
    expect(() => resolveMessageId({ header: '' })).toThrow(/header/);
  });

  it('counts attempts from the x-inboxed-attempt header of retried copies; only handler failures advance it', () => {
    expect(attemptOf(delivery({}))).toBe(1);
    expect(attemptOf(delivery({ headers: { 'x-inboxed-attempt': 2 } }))).toBe(3);
    expect(attemptOf(delivery({ headers: { 'x-inboxed-attempt': '4' } }))).toBe(5);
    expect(attemptOf(delivery({ headers: { 'x-inboxed-attempt': 'junk' } }))).toBe(1);
    const third = delivery({ headers: { 'x-inboxed-attempt': 2 } });
    const retry = (reason: string, attempt?: number) => ({ status: 'retry', messageId: 'm', consumer: 'c', reason, attempt }) as never;
    expect(retriedAttempt(third, retry('handler-failed', 3))).toBe(3);
    expect(retriedAttempt(third, retry('database-unavailable', 3))).toBe(2);
    expect(retriedAttempt(third, retry('processor-threw', 3))).toBe(2);
    expect(retriedAttempt(third, retry('lease-lost', 3))).toBe(2);
    // busy (another worker holds the lease) is never an attempt, whatever its reason says.
    const busy = (reason: string) => ({ status: 'busy', messageId: 'm', consumer: 'c', reason, attempt: 3, retryAfterMs: 200 }) as never;
    expect(retriedAttempt(third, busy('lease-held'))).toBe(2);
    expect(retriedAttempt(third, busy('handler-failed'))).toBe(2);
    expect(retriedAttempt(delivery({}), busy('lease-held'))).toBe(0); // first delivery: the copy carries no attempt header
  });

  it('decodes JSON by content type, passes other bodies as Buffers, dead-letters broken JSON and missing ids itself', () => {
    expect(mapDelivery(delivery({ messageId: 'j', contentType: 'application/json' }), context, now)).toMatchObject({
      id: 'j',
      message: { id: 'j', payload: { a: 1 }, attempt: 1, source: 'amqp:q', receivedAt: now },
    });
    const raw = mapDelivery(delivery({ messageId: 'r' }, 'bytes'), context, now);
    expect('message' in raw && Buffer.isBuffer(raw.message.payload)).toBe(true);
    expect(mapDelivery(delivery({ messageId: 'b', contentType: 'application/json' }, '{'), context, now)).toMatchObject({
      outcome: { status: 'dead-letter', reason: 'unparseable-body', messageId: 'b', error: { code: 'UNPARSEABLE_BODY' } },
    });
    expect(mapDelivery(delivery({ contentType: 'application/json' }), context, now)).toMatchObject({
      id: undefined,
      outcome: { status: 'dead-letter', reason: 'missing-message-id', messageId: '', error: { code: 'INVALID_MESSAGE_ID' } },
    });
    const throwing = {
      ...context,
      messageId: resolveMessageId({
        extract: () => {
          throw new Error('boom');
        },
      }),
    };
    expect(mapDelivery(delivery({ messageId: 'x' }), throwing, now)).toMatchObject({ outcome: { status: 'dead-letter', reason: 'invalid-message-id' } });
  });
});
