import type { Message } from '@aws-sdk/client-sqs';
import { InboxError } from '@inboxed/core';
import { describe, expect, it } from 'vitest';
import { deadLetterAttributes, OVERFLOW_ATTRIBUTE, packAttributes, sqsSafeText } from './sqs-dead-letter.js';
import { messageIdOf, messageMapping, receiveCount, sourceOf, toInboxMessage } from './sqs-message.js';
import { capVisibility, MAX_VISIBILITY_TIMEOUT_SECONDS, retryVisibilitySeconds } from './sqs-visibility.js';

const mapping = messageMapping(undefined, undefined, 'https://sqs.eu-west-1.amazonaws.com/1/orders');
const message = (extra: Partial<Message> = {}): Message => ({ MessageId: 'sqs-id', ReceiptHandle: 'rh', Body: '{"a":1}', ...extra });
const idOf = (m: Message, options: Parameters<typeof messageMapping>[0] = {}) => messageIdOf(m, messageMapping(options, undefined, 'q')).id;

describe('message id extraction', () => {
  it('tries extract, then the attribute, then the FIFO deduplication id, then (only with fallback) the SQS MessageId', () => {
    const withAttribute = message({
      MessageAttributes: { 'message-id': { DataType: 'String', StringValue: 'attr-id' } },
      Attributes: { MessageDeduplicationId: 'dedup' },
    });
    expect(idOf(withAttribute, { extract: () => 'custom' })).toBe('custom');
    expect(idOf(withAttribute, { extract: () => undefined })).toBe('attr-id');
    expect(idOf(withAttribute)).toBe('attr-id');
    expect(idOf(message({ Attributes: { MessageDeduplicationId: 'dedup' } }))).toBe('dedup');
    expect(idOf(message())).toBeUndefined();
    expect(idOf(message(), { fallback: true })).toBe('sqs-id');
    expect(idOf(message({ MessageAttributes: { id: { DataType: 'Binary', BinaryValue: Buffer.from('bin-id') } } }), { attribute: 'id' })).toBe('bin-id');
  });

  it('a content-based deduplication id (SHA-256 hex of the UTF-8 body) is not an id; one the producer chose still is', () => {
    // SHA-256 of the bodies as SQS computes it for ContentBasedDeduplication (lower-case hex).
    const hashOfA1 = '015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862';
    const hashOfCafe = 'a84c174531ab46d58aaeb9c85aed22981d418f25bead412cd282e97f427a0ba1';
    expect(idOf(message({ Attributes: { MessageDeduplicationId: hashOfA1 } }))).toBeUndefined();
    expect(idOf(message({ Attributes: { MessageDeduplicationId: hashOfA1.toUpperCase() } }))).toBeUndefined();
    expect(idOf(message({ Body: '{"note":"café"}', Attributes: { MessageDeduplicationId: hashOfCafe } }))).toBeUndefined();
    // Without another id it is dead-lettered as missing, or falls back to the SQS MessageId when asked.
    expect(toInboxMessage(message({ Attributes: { MessageDeduplicationId: hashOfA1 } }), mapping, 'c', new Date(0))).toMatchObject({
      ok: false,
      outcome: { status: 'dead-letter', reason: 'missing-message-id' },
    });
    expect(idOf(message({ Attributes: { MessageDeduplicationId: hashOfA1 } }), { fallback: true })).toBe('sqs-id');
    // The hash of another body, or any other producer id, is the producer's.
    expect(idOf(message({ Body: '{"a":2}', Attributes: { MessageDeduplicationId: hashOfA1 } }))).toBe(hashOfA1);
    expect(idOf(message({ Attributes: { MessageDeduplicationId: 'order-1' } }))).toBe('order-1');
  });

  it('a Binary id attribute that is not well-formed UTF-8 is refused as invalid-message-id: two ids never become one', () => {
    for (const bytes of [
      [0xff, 0x41],
      [0xfe, 0x41],
    ]) {
      const binary = message({ MessageAttributes: { 'message-id': { DataType: 'Binary', BinaryValue: Buffer.from(bytes) } } });
      expect(messageIdOf(binary, messageMapping(undefined, undefined, 'q'))).toMatchObject({
        id: undefined,
        problem: { reason: 'invalid-message-id', error: { code: 'INVALID_MESSAGE_ID' } },
      });
    }
  });

  it('an extractor that throws gives no id (not the next in the chain) and says why', () => {
    const withAttribute = message({ MessageAttributes: { 'message-id': { DataType: 'String', StringValue: 'attr-id' } } });
    const result = messageIdOf(
      withAttribute,
      messageMapping(
        {
          extract: () => {
            throw new Error('bad body');
          },
        },
        undefined,
        'q',
      ),
    );
    expect(result).toMatchObject({
      id: undefined,
      problem: { reason: 'missing-message-id', error: { code: 'INVALID_MESSAGE_ID', message: 'messageId.extract threw: Error: bad body' } },
    });
    const notAString = messageIdOf(withAttribute, messageMapping({ extract: () => 42 as never }, undefined, 'q'));
    expect(notAString).toMatchObject({
      id: undefined,
      problem: { reason: 'invalid-message-id', error: { message: 'messageId.extract returned number, not a string' } },
    });
  });

  it('maps attempt, payload, headers and source; an unparseable body or a missing id becomes the dead-letter the adapter decides', () => {
    const withId = (extra: Partial<Message> = {}) => message({ MessageAttributes: { 'message-id': { DataType: 'String', StringValue: 'm-1' } }, ...extra });
    const mapped = toInboxMessage(withId({ Attributes: { ApproximateReceiveCount: '3' } }), mapping, 'c', new Date(0));
    expect(mapped).toMatchObject({
      ok: true,
      message: { id: 'm-1', payload: { a: 1 }, attempt: 3, source: 'sqs:orders', headers: { 'sqs:ApproximateReceiveCount': '3', 'message-id': 'm-1' } },
    });
    // Received before: the earlier receive may have died with its process, so core counts the attempt ahead.
    expect(mapped).toMatchObject({ message: { redelivered: true } });
    const first = toInboxMessage(withId({ Attributes: { ApproximateReceiveCount: '1' } }), mapping, 'c', new Date(0));
    expect(first.ok && 'redelivered' in first.message).toBe(false);
    expect(toInboxMessage(withId({ Body: 'not json' }), mapping, 'c', new Date(0))).toMatchObject({
      ok: false,
      outcome: { status: 'dead-letter', reason: 'unparseable-body', messageId: 'm-1', error: { code: 'UNPARSEABLE_BODY' } },
    });
    expect(toInboxMessage(message(), mapping, 'c', new Date(0))).toMatchObject({
      ok: false,
      outcome: { status: 'dead-letter', reason: 'missing-message-id', messageId: '', error: { code: 'INVALID_MESSAGE_ID' } },
    });
    expect(receiveCount(message())).toBeUndefined();
    expect(sourceOf('https://sqs.eu-west-1.amazonaws.com/123/orders.fifo')).toBe('sqs:orders.fifo');
  });

  it("decodes bodies per payload mode: 'raw' bytes, 'content-type' JSON only when the content-type attribute says so", () => {
    const raw = toInboxMessage(message({ Body: 'plain' }), messageMapping({ fallback: true }, 'raw', 'q'), 'c', new Date(0));
    expect(raw.ok && Buffer.isBuffer(raw.message.payload) && raw.message.payload.toString()).toBe('plain');
    const typed = (contentType: string, Body: string) =>
      toInboxMessage(
        message({ Body, MessageAttributes: { 'content-type': { DataType: 'String', StringValue: contentType } } }),
        messageMapping({ fallback: true }, 'content-type', 'q'),
        'c',
        new Date(0),
      );
    expect(typed('application/json', '{"a":2}')).toMatchObject({ ok: true, message: { payload: { a: 2 } } });
    const text = typed('text/plain', 'hello');
    expect(text.ok && Buffer.isBuffer(text.message.payload)).toBe(true);
  });
});

describe('visibility', () => {
  it('uses retryAfterMs when core gave one, else backoff on the receive count, rounded up and capped at 12 h', () => {
    expect(
      retryVisibilitySeconds(
        { status: 'retry', messageId: 'm', consumer: 'c', reason: 'handler-failed', error: new InboxError('HANDLER_FAILED', 'x'), retryAfterMs: 1500 },
        1,
        {},
      ),
    ).toBe(2);
    expect(retryVisibilitySeconds(undefined, 3, { baseDelayMs: 1000, jitter: 'none' })).toBe(4);
    expect(retryVisibilitySeconds(undefined, 40, { baseDelayMs: 1000, maxDelayMs: 10 ** 9, jitter: 'none' })).toBe(MAX_VISIBILITY_TIMEOUT_SECONDS);
  });

  it('busy: its own retryAfterMs rounded up, at least 1 s, never the receive-count backoff', () => {
    const busy = (retryAfterMs: number) => ({ status: 'busy' as const, messageId: 'm', consumer: 'c', reason: 'lease-held', retryAfterMs });
    const backoff = { baseDelayMs: 60_000, jitter: 'none' as const };
    expect(retryVisibilitySeconds(busy(1000), 9, backoff)).toBe(1);
    expect(retryVisibilitySeconds(busy(2500), 9, backoff)).toBe(3);
    expect(retryVisibilitySeconds(busy(0), 9, backoff)).toBe(1);
    expect(retryVisibilitySeconds(busy(Number.NaN), 9, backoff)).toBe(1);
    expect(retryVisibilitySeconds(busy(10 ** 12), 1, backoff)).toBe(MAX_VISIBILITY_TIMEOUT_SECONDS);
  });

  it('never extends a receive past 12 hours in total', () => {
    const receivedAt = new Date(0);
    expect(capVisibility(30, receivedAt, 1000)).toBe(30);
    expect(capVisibility(30, receivedAt, (MAX_VISIBILITY_TIMEOUT_SECONDS - 10) * 1000)).toBe(10);
    expect(capVisibility(30, receivedAt, (MAX_VISIBILITY_TIMEOUT_SECONDS + 5) * 1000)).toBe(0);
  });
});

describe('dead-letter attributes', () => {
  it('keeps 10 attributes at most and packs the rest into one JSON attribute', () => {
    const entries = Array.from(
      { length: 12 },
      (_, i) => [`a${i}`, { DataType: 'String', StringValue: `v${i}` }] as [string, { DataType: string; StringValue: string }],
    );
    const packed = packAttributes(entries);
    expect(Object.keys(packed)).toHaveLength(10);
    expect(JSON.parse(packed[OVERFLOW_ATTRIBUTE]!.StringValue!)).toEqual({
      a9: { type: 'String', value: 'v9' },
      a10: { type: 'String', value: 'v10' },
      a11: { type: 'String', value: 'v11' },
    });
    expect(packAttributes(entries.slice(0, 10))).not.toHaveProperty(OVERFLOW_ATTRIBUTE);
  });

  it('puts the message id and reason first, then core headers, SQS extras and original attributes', () => {
    const attributes = deadLetterAttributes(
      { status: 'dead-letter', messageId: 'm-1', consumer: 'c', reason: 'permanent-failure', attempt: 2, error: new InboxError('PERMANENT_FAILURE', 'x') },
      message({ Attributes: { ApproximateReceiveCount: '2' }, MessageAttributes: { tenant: { DataType: 'String', StringValue: 'acme' } } }),
      { queueUrl: 'https://q/orders', messageIdAttribute: 'message-id', messageId: 'm-1', now: new Date(0) },
    );
    expect(Object.keys(attributes)).toHaveLength(10);
    expect(attributes['message-id']?.StringValue).toBe('m-1');
    expect(attributes['x-inboxed-reason']?.StringValue).toBe('permanent-failure');
    const overflow = JSON.parse(attributes[OVERFLOW_ATTRIBUTE]!.StringValue!) as Record<string, { value: string }>;
    expect(overflow.tenant?.value).toBe('acme');
    expect(overflow['x-inboxed-receive-count']?.value).toBe('2');
  });

  it('never carries a character SQS refuses (a refused dead-letter would keep coming back); an id it cannot carry is left to the body', () => {
    const error = new InboxError('HANDLER_FAILED', 'bad \u0001 control \uFFFE char \u{1F600} kept');
    const attributes = deadLetterAttributes({ status: 'dead-letter', messageId: 'id-\u0002', consumer: 'c', reason: 'permanent-failure', error }, message(), {
      queueUrl: 'https://q/orders',
      messageIdAttribute: 'message-id',
      messageId: 'id-\u0002',
      now: new Date(0),
    });
    expect(attributes['x-inboxed-error']?.StringValue).toBe('bad \uFFFD control \uFFFD char \u{1F600} kept');
    expect(attributes['message-id']).toBeUndefined();
    expect(attributes['x-inboxed-message-id']?.StringValue).toBe('id-\uFFFD');
    for (const value of Object.values(attributes)) expect(value.StringValue).toBe(sqsSafeText(value.StringValue!));
  });

  it('leaves out empty values (SQS refuses them) and, minimal, keeps only the id and reason attributes', () => {
    const outcome = {
      status: 'dead-letter' as const,
      messageId: '',
      consumer: 'c',
      reason: 'missing-message-id',
      error: new InboxError('INVALID_MESSAGE_ID', 'no id'),
    };
    const full = deadLetterAttributes(outcome, message({ MessageAttributes: { tenant: { DataType: 'String', StringValue: 'acme' } } }), {
      queueUrl: 'https://q/orders',
      messageIdAttribute: 'message-id',
      messageId: undefined,
      now: new Date(0),
    });
    expect(full).not.toHaveProperty('x-inboxed-message-id');
    expect(Object.values(full).every((v) => v.StringValue !== '')).toBe(true);
    const minimal = deadLetterAttributes(
      { ...outcome, messageId: 'm-1' },
      message({ MessageAttributes: { tenant: { DataType: 'String', StringValue: 'acme' } } }),
      { queueUrl: 'https://q/orders', messageIdAttribute: 'message-id', messageId: 'm-1', now: new Date(0) },
      true,
    );
    expect(Object.keys(minimal).sort()).toEqual(
      ['message-id', 'x-inboxed-attempt', 'x-inboxed-consumer', 'x-inboxed-error', 'x-inboxed-error-code', 'x-inboxed-message-id', 'x-inboxed-reason'].sort(),
    );
  });
});
