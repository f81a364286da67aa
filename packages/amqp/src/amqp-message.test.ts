import type { ConsumeMessage } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { attemptOf, extractMessageId, mapDelivery, resolveMessageId } from './amqp-message.js';
import { EventEmitter } from 'node:events';
import type { ConfirmChannel } from 'amqplib';
import { encodedTableSize, fitHeaders, HEADERS_BUDGET_BYTES, HEADERS_DROPPED_HEADER, messageIdHeaderOf, useAmqplibEncoder } from './amqp-header-budget.js';
import { ConfirmedPublisher } from './amqp-publisher.js';
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
  it('marks a delivery RabbitMQ redelivered (its earlier delivery may have died with its process), and only that one', () => {
    const first = mapDelivery(delivery({ messageId: 'm' }), context, now);
    expect('message' in first && first.message !== undefined && !('redelivered' in first.message)).toBe(true);
    const again = delivery({ messageId: 'm' });
    again.fields.redelivered = true;
    expect(mapDelivery(again, context, now)).toMatchObject({ message: { id: 'm', redelivered: true } });
  });

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
    // Copies carry the id in this header: it must be encodable and not one inboxed writes itself.
    expect(() => resolveMessageId({ header: 'h'.repeat(256) })).toThrow(/255 bytes/);
    expect(() => resolveMessageId({ header: 'x-inboxed-attempt' })).toThrow(/x-inboxed-/);
    expect(() => resolveMessageId({ header: 'X-Inboxed-Publish-Id' })).toThrow(/x-inboxed-/);
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

describe('copy headers: the budget', () => {
  const own = { 'x-inboxed-attempt': 1, 'x-inboxed-original-queue': 'orders' };

  it('sizes headers as amqplib encodes them: 8,500 booleans fit and are all kept, at once', () => {
    const headers: Record<string, unknown> = {};
    for (let i = 0; i < 8_500; i++) headers[`b${i.toString(36)}`] = true;
    const started = performance.now();
    const fitted = fitHeaders(headers, own);
    expect(performance.now() - started).toBeLessThan(500);
    expect(fitted.dropped).toEqual([]);
    expect(encodedTableSize({ ...headers, ...own })).toBeLessThan(HEADERS_BUDGET_BYTES);
  });

  it('drops an unencodable header first and alone, then the largest ones, never an own header (the id header among them)', () => {
    const id = `order-${'L'.repeat(294)}`;
    // As amqplib decodes a double of -1e19: a plain number, which it types as a long and cannot write back.
    const headers: Record<string, unknown> = { 'message-id': id, score: -1e19, keep: 'me' };
    expect(fitHeaders(headers, { ...messageIdHeaderOf('message-id', id), ...own })).toMatchObject({ dropped: ['score'] });
    for (let i = 0; i < 875; i++) headers[`h${String(i).padStart(3, '0')}`] = 'v'.repeat(60);
    const fitted = fitHeaders(headers, { ...messageIdHeaderOf('message-id', id), ...own });
    expect(fitted.dropped[0]).toBe('score');
    expect(fitted.dropped).not.toContain('message-id');
    expect(fitted.headers['message-id']).toBe(id);
    expect(fitted.headers[HEADERS_DROPPED_HEADER]).toEqual(expect.arrayContaining(['score']));
    expect(encodedTableSize(fitted.headers)).toBeLessThanOrEqual(HEADERS_BUDGET_BYTES);
    expect(fitted.dropped.length).toBeLessThan(60); // only what had to go
  });

  it('the id header of a copy: none without a valid id', () => {
    expect(messageIdHeaderOf('my-id', 'a')).toEqual({ 'my-id': 'a' });
    expect(messageIdHeaderOf('my-id', undefined)).toEqual({});
    expect(messageIdHeaderOf('my-id', 'x'.repeat(513))).toEqual({});
  });

  it("falls back to a conservative estimate without amqplib's encoder", () => {
    useAmqplibEncoder(false);
    try {
      const fitted = fitHeaders({ 'message-id': 'm', pad: 'x'.repeat(64_900), small: 'kept' }, { ...messageIdHeaderOf('message-id', 'm'), ...own });
      expect(fitted.dropped).toEqual(['pad']);
      expect(encodedTableSize({ flag: true })).toBeGreaterThanOrEqual(4 + 1 + 4 + 2);
    } finally {
      useAmqplibEncoder(true);
    }
  });
});

describe('ConfirmedPublisher: a publish that throws', () => {
  /** A confirm channel stand-in: `register` says whether a throwing publish left a confirm callback behind (amqplib 0.10). */
  function fakeChannel(register: boolean) {
    const channel = Object.assign(new EventEmitter(), {
      unconfirmed: [] as unknown[],
      closed: false,
      publish(_exchange: string, routingKey: string, _content: Buffer, _options: unknown, callback: (error: unknown) => void) {
        if (routingKey === 'bad') {
          if (register) channel.unconfirmed.push(callback);
          throw new RangeError('cannot encode');
        }
        channel.unconfirmed.push(callback);
        return true;
      },
      async close() {
        channel.closed = true;
      },
    });
    return channel;
  }

  it('without a stale confirm callback (amqplib 2.x): only that copy fails, the channel is kept, copies awaiting confirms are not failed', async () => {
    const channel = fakeChannel(false);
    let replaced = 0;
    const publisher = new ConfirmedPublisher(channel as unknown as ConfirmChannel, async () => {
      replaced++;
      return undefined;
    });
    const waiting = publisher.publish('', 'good', Buffer.from('a'), {}, ['a']);
    await expect(publisher.publish('', 'bad', Buffer.from('b'), {}, ['b'])).rejects.toMatchObject({ code: 'AMQP_COPY_UNENCODABLE' });
    (channel.unconfirmed[0] as (error: unknown) => void)(null);
    await expect(waiting).resolves.toBeUndefined();
    expect(replaced).toBe(0);
    expect(publisher.currentChannel).toBe(channel);
    const next = publisher.publish('', 'good', Buffer.from('c'), {}, ['c']);
    (channel.unconfirmed[1] as (error: unknown) => void)(null);
    await expect(next).resolves.toBeUndefined();
  });

  it('with a stale callback and no replacement (createAmqpMessageHandler on 0.10): the channel is left open, copies fail with a clear error', async () => {
    const channel = fakeChannel(true);
    const publisher = new ConfirmedPublisher(channel as unknown as ConfirmChannel);
    const waiting = publisher.publish('', 'good', Buffer.from('a'), {}, ['a']);
    await expect(publisher.publish('', 'bad', Buffer.from('b'), {}, ['b'])).rejects.toMatchObject({ code: 'AMQP_COPY_UNENCODABLE' });
    await expect(waiting).rejects.toMatchObject({ code: 'AMQP_PUBLISH_FAILED' });
    await expect(publisher.publish('', 'good', Buffer.from('c'), {}, ['c'])).rejects.toThrow(/give the handler a new confirm channel/);
    expect(channel.closed).toBe(false);
  });
});
