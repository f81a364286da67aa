import { describe, expect, it } from 'vitest';
import { messageIdOf, toInboxMessage, type KafkaDelivery, type MessageMapping } from './kafka-message.js';
import type { KafkaRecord } from './kafka-types.js';

const defaults: MessageMapping = { messageId: {}, payload: 'json' };
const delivery = (over: Partial<KafkaRecord> = {}): KafkaDelivery => ({
  topic: 'payments',
  partition: 3,
  message: { key: null, value: Buffer.from('{"amount":5}'), offset: '42', timestamp: '1700000000000', headers: {}, ...over },
});

describe('message ids', () => {
  it('reads the message-id header (Buffer, string, or the first of repeated headers)', () => {
    expect(messageIdOf(delivery({ headers: { 'message-id': Buffer.from('pay-1') } }), {})).toBe('pay-1');
    expect(messageIdOf(delivery({ headers: { 'message-id': 'pay-2' } }), {})).toBe('pay-2');
    expect(messageIdOf(delivery({ headers: { 'message-id': [Buffer.from('pay-3'), Buffer.from('other')] } }), {})).toBe('pay-3');
  });

  it('uses a configured header name and lets the extractor win', () => {
    const headers = { 'x-id': 'from-header', 'message-id': 'ignored' };
    expect(messageIdOf(delivery({ headers }), { header: 'x-id' })).toBe('from-header');
    expect(messageIdOf(delivery({ headers, key: Buffer.from('k-1') }), { extract: (d) => d.message.key?.toString() })).toBe('k-1');
    expect(messageIdOf(delivery({ headers }), { extract: () => undefined })).toBe('ignored');
  });

  it('falls back to topic/partition/offset only with fallback: true', () => {
    expect(messageIdOf(delivery(), {})).toBeUndefined();
    expect(messageIdOf(delivery(), { fallback: true })).toBe('payments/3/42');
    expect(messageIdOf(delivery(), { extract: () => undefined, fallback: true })).toBe('payments/3/42');
  });
});

describe('toInboxMessage', () => {
  it('marks the message redelivered only when asked to (the field is absent otherwise)', () => {
    const record = delivery({ headers: { 'message-id': 'pay-1' } });
    const plain = toInboxMessage(record, defaults, 'billing');
    expect(plain.ok && 'redelivered' in plain.message).toBe(false);
    const marked = toInboxMessage(record, defaults, 'billing', new Date(), 'kafka:payments/3', true);
    expect(marked.ok && marked.message.redelivered).toBe(true);
  });

  it('decodes JSON values and string headers, and names the source partition', () => {
    const received = new Date('2026-01-01T00:00:00Z');
    const mapped = toInboxMessage(delivery({ headers: { 'message-id': Buffer.from('pay-1'), trace: Buffer.from('t-1') } }), defaults, 'billing', received);
    expect(mapped).toEqual({
      ok: true,
      message: { id: 'pay-1', payload: { amount: 5 }, headers: { 'message-id': 'pay-1', trace: 't-1' }, source: 'kafka:payments/3', receivedAt: received },
    });
  });

  it('dead-letters a record without an id as missing-message-id, before looking at its value', () => {
    const mapped = toInboxMessage(delivery({ value: Buffer.from('{nope') }), defaults, 'billing');
    expect(mapped).toMatchObject({ ok: false, outcome: { status: 'dead-letter', reason: 'missing-message-id', messageId: '', consumer: 'billing' } });
    expect(!mapped.ok && mapped.outcome.error?.code).toBe('INVALID_MESSAGE_ID');
  });

  it('dead-letters an id that cannot be read exactly, or an extractor that throws, as invalid-message-id: two ids never become one', () => {
    for (const bytes of [
      [0xff, 0x41],
      [0xfe, 0x41],
    ]) {
      const mapped = toInboxMessage(delivery({ headers: { 'message-id': Buffer.from(bytes) } }), defaults, 'billing');
      expect(mapped).toMatchObject({ ok: false, outcome: { status: 'dead-letter', reason: 'invalid-message-id', error: { code: 'INVALID_MESSAGE_ID' } } });
    }
    const throwing: MessageMapping = {
      ...defaults,
      messageId: {
        extract: () => {
          throw new Error('boom');
        },
      },
    };
    const mapped = toInboxMessage(delivery({ headers: { 'message-id': 'pay-1' } }), throwing, 'billing');
    expect(mapped).toMatchObject({ ok: false, outcome: { status: 'dead-letter', reason: 'invalid-message-id', error: { code: 'INVALID_MESSAGE_ID' } } });
  });

  it('dead-letters unparseable JSON as unparseable-body (UNPARSEABLE_BODY) with its id', () => {
    const mapped = toInboxMessage(delivery({ value: Buffer.from('{nope'), headers: { 'message-id': 'pay-9' } }), defaults, 'billing');
    expect(mapped).toMatchObject({ ok: false, outcome: { status: 'dead-letter', reason: 'unparseable-body', messageId: 'pay-9' } });
    expect(!mapped.ok && mapped.outcome.error?.code).toBe('UNPARSEABLE_BODY');
  });

  it('keeps raw bytes in raw mode, decodes by content-type in content-type mode, and maps tombstones to null', () => {
    const id = { 'message-id': 'pay-1' };
    const raw = toInboxMessage(delivery({ value: Buffer.from([1, 2, 3]), headers: id }), { ...defaults, payload: 'raw' }, 'c');
    expect(raw.ok && Buffer.isBuffer(raw.message.payload)).toBe(true);
    const typed = toInboxMessage(delivery({ headers: { ...id, 'content-type': 'application/json' } }), { ...defaults, payload: 'content-type' }, 'c');
    expect(typed.ok && typed.message.payload).toEqual({ amount: 5 });
    const untyped = toInboxMessage(delivery({ value: Buffer.from('plain'), headers: id }), { ...defaults, payload: 'content-type' }, 'c');
    expect(untyped.ok && Buffer.isBuffer(untyped.message.payload)).toBe(true);
    const tombstone = toInboxMessage(delivery({ value: null, headers: id }), defaults, 'c');
    expect(tombstone.ok && tombstone.message.payload).toBeNull();
  });
});
