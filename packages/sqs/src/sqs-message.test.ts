import type { Message } from '@aws-sdk/client-sqs';
import { describe, expect, it } from 'vitest';
import { InboxError } from '@inboxed/core';
import { deadLetterAttributes, OVERFLOW_ATTRIBUTE, packAttributes, sqsSafeText } from './sqs-dead-letter.js';
import { receiveCount, sourceOf, sqsMessageId, toInboxMessage, type SqsMessageMapping } from './sqs-message.js';
import { capVisibility, MAX_VISIBILITY_TIMEOUT_SECONDS, retryVisibilitySeconds } from './sqs-visibility.js';

const mapping: SqsMessageMapping = { messageIdAttribute: 'message-id', sqsIdFallback: true, source: 'sqs:orders' };
const message = (extra: Partial<Message> = {}): Message => ({ MessageId: 'sqs-id', ReceiptHandle: 'rh', Body: '{"a":1}', ...extra });

describe('message id extraction', () => {
  it('prefers the extractor, then the attribute, then the FIFO deduplication id, then the SQS MessageId', () => {
    const withAttribute = message({
      MessageAttributes: { 'message-id': { DataType: 'String', StringValue: 'attr-id' } },
      Attributes: { MessageDeduplicationId: 'dedup' },
    });
    expect(sqsMessageId(withAttribute, { ...mapping, extractMessageId: () => 'custom' })).toBe('custom');
    expect(sqsMessageId(withAttribute, mapping)).toBe('attr-id');
    expect(sqsMessageId(message({ Attributes: { MessageDeduplicationId: 'dedup' } }), mapping)).toBe('dedup');
    expect(sqsMessageId(message(), mapping)).toBe('sqs-id');
    expect(sqsMessageId(message(), { ...mapping, sqsIdFallback: false })).toBeUndefined();
    expect(
      sqsMessageId(message({ MessageAttributes: { id: { DataType: 'Binary', BinaryValue: Buffer.from('bin-id') } } }), {
        ...mapping,
        messageIdAttribute: 'id',
      }),
    ).toBe('bin-id');
  });

  it('maps attempt, payload, headers and source; an unparseable body becomes an unparseable-body dead-letter', () => {
    const mapped = toInboxMessage(message({ Attributes: { ApproximateReceiveCount: '3' } }), mapping, 'c', new Date(0));
    expect(mapped).toMatchObject({
      ok: true,
      message: { id: 'sqs-id', payload: { a: 1 }, attempt: 3, source: 'sqs:orders', headers: { 'sqs:ApproximateReceiveCount': '3' } },
    });
    const bad = toInboxMessage(message({ Body: 'not json' }), mapping, 'c', new Date(0));
    expect(bad).toMatchObject({
      ok: false,
      outcome: { status: 'dead-letter', reason: 'unparseable-body', messageId: 'sqs-id', error: { code: 'UNPARSEABLE_BODY' } },
    });
    expect(receiveCount(message())).toBeUndefined();
    expect(sourceOf('https://sqs.eu-west-1.amazonaws.com/123/orders.fifo')).toBe('sqs:orders.fifo');
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
    for (const value of Object.values(attributes)) expect(value.StringValue).toBe(sqsSafeText(value.StringValue!));
  });
});
