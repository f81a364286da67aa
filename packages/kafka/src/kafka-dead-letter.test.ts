import { InboxError } from '@inboxed/core';
import { describe, expect, it } from 'vitest';
import { deadLetterRecord, deadLetterTopicFor } from './kafka-dead-letter.js';

describe('dead-letter records', () => {
  it('names the dead-letter topic <topic>.dlq by default, or as configured', () => {
    expect(deadLetterTopicFor(undefined, 'payments')).toBe('payments.dlq');
    expect(deadLetterTopicFor('all-dead', 'payments')).toBe('all-dead');
    expect(deadLetterTopicFor((t) => `dlq.${t}`, 'payments')).toBe('dlq.payments');
  });

  it('keeps key, value and original headers, and adds reason, error and origin headers', () => {
    const now = new Date('2026-01-02T03:04:05.000Z');
    const outcome = {
      status: 'conflict' as const,
      messageId: 'pay-1',
      consumer: 'billing',
      reason: 'payload-mismatch',
      attempt: 1,
      error: new InboxError('PAYLOAD_MISMATCH', 'payload differs'),
    };
    const record = deadLetterRecord(
      {
        key: Buffer.from('k'),
        value: Buffer.from('{"a":2}'),
        offset: '7',
        timestamp: '1700000000000',
        headers: { trace: Buffer.from('t-1'), 'x-inboxed-reason': 'stale' },
      },
      { topic: 'payments', partition: 2, groupId: 'billing-group' },
      outcome,
      now,
    );
    expect(record.key?.toString()).toBe('k');
    expect(record.value?.toString()).toBe('{"a":2}');
    expect(Object.fromEntries(Object.entries(record.headers ?? {}).map(([k, v]) => [k, v.toString()]))).toEqual({
      trace: 't-1',
      'x-inboxed-reason': 'payload-mismatch',
      'x-inboxed-error': 'payload differs',
      'x-inboxed-error-code': 'PAYLOAD_MISMATCH',
      'x-inboxed-consumer': 'billing',
      'x-inboxed-message-id': 'pay-1',
      'x-inboxed-attempt': '1',
      'x-inboxed-first-attempt-at': now.toISOString(),
      'x-inboxed-last-attempt-at': now.toISOString(),
      'x-inboxed-dead-lettered-at': now.toISOString(),
      'x-inboxed-original-topic': 'payments',
      'x-inboxed-original-partition': '2',
      'x-inboxed-original-offset': '7',
      'x-inboxed-original-timestamp': '1700000000000',
      'x-inboxed-group-id': 'billing-group',
    });
  });
});
