import { describe, expect, it } from 'vitest';
import { messageIdOf, toInboxMessage, type MessageMappingOptions } from './kafka-message.js';
import type { KafkaRecord } from './kafka-types.js';

const defaults: MessageMappingOptions = { messageIdHeader: 'message-id', extractMessageId: undefined, messageIdFallback: 'record', payload: 'json' };
const position = { topic: 'payments', partition: 3 };
const record = (over: Partial<KafkaRecord> = {}): KafkaRecord => ({
  key: null,
  value: Buffer.from('{"amount":5}'),
  offset: '42',
  timestamp: '1700000000000',
  headers: {},
  ...over,
});

describe('message ids', () => {
  it('reads the message-id header (Buffer, string, or the first of repeated headers)', () => {
    expect(messageIdOf(record({ headers: { 'message-id': Buffer.from('pay-1') } }), position, defaults)).toBe('pay-1');
    expect(messageIdOf(record({ headers: { 'message-id': 'pay-2' } }), position, defaults)).toBe('pay-2');
    expect(messageIdOf(record({ headers: { 'message-id': [Buffer.from('pay-3'), Buffer.from('other')] } }), position, defaults)).toBe('pay-3');
  });

  it('uses a configured header name and lets the extractor win', () => {
    const headers = { 'x-id': 'from-header', 'message-id': 'ignored' };
    expect(messageIdOf(record({ headers }), position, { ...defaults, messageIdHeader: 'x-id' })).toBe('from-header');
    expect(messageIdOf(record({ headers, key: Buffer.from('k-1') }), position, { ...defaults, extractMessageId: (r) => r.key?.toString() })).toBe('k-1');
  });

  it('falls back to topic/partition/offset, or to nothing with messageIdFallback none', () => {
    expect(messageIdOf(record(), position, defaults)).toBe('payments/3/42');
    expect(messageIdOf(record(), position, { ...defaults, extractMessageId: () => undefined })).toBe('payments/3/42');
    expect(messageIdOf(record(), position, { ...defaults, messageIdFallback: 'none' })).toBeUndefined();
  });
});

describe('toInboxMessage', () => {
  it('decodes JSON values and string headers, and names the source partition', () => {
    const mapped = toInboxMessage(record({ headers: { 'message-id': Buffer.from('pay-1'), trace: Buffer.from('t-1') } }), position, defaults);
    expect(mapped).toMatchObject({
      ok: true,
      message: { id: 'pay-1', payload: { amount: 5 }, headers: { 'message-id': 'pay-1', trace: 't-1' }, source: 'kafka:payments/3' },
    });
  });

  it('reports unparseable JSON as UNPARSEABLE_BODY with the id it would have had', () => {
    const mapped = toInboxMessage(record({ value: Buffer.from('{nope') }), position, defaults);
    expect(mapped.ok).toBe(false);
    if (!mapped.ok) {
      expect(mapped.messageId).toBe('payments/3/42');
      expect(mapped.error.code).toBe('UNPARSEABLE_BODY');
    }
  });

  it('keeps raw bytes in raw mode, decodes by content-type in content-type mode, and maps tombstones to null', () => {
    const raw = toInboxMessage(record({ value: Buffer.from([1, 2, 3]) }), position, { ...defaults, payload: 'raw' });
    expect(raw.ok && Buffer.isBuffer(raw.message.payload)).toBe(true);
    const typed = toInboxMessage(record({ headers: { 'content-type': 'application/json' } }), position, { ...defaults, payload: 'content-type' });
    expect(typed.ok && typed.message.payload).toEqual({ amount: 5 });
    const untyped = toInboxMessage(record({ value: Buffer.from('plain') }), position, { ...defaults, payload: 'content-type' });
    expect(untyped.ok && Buffer.isBuffer(untyped.message.payload)).toBe(true);
    const tombstone = toInboxMessage(record({ value: null }), position, defaults);
    expect(tombstone.ok && tombstone.message.payload).toBeNull();
  });
});
