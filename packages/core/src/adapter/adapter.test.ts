import { describe, expect, it } from 'vitest';
import { InboxError } from '../errors.js';
import { actionFor, deadLetterHeaders } from './outcomes.js';
import { decodePayload } from './payload.js';
import { InFlight } from './in-flight.js';

describe('adapter building blocks', () => {
  it('decodes JSON per mode and content type, and reports unparseable bodies', () => {
    expect(decodePayload(Buffer.from('{"a":1}'), 'json')).toEqual({ ok: true, payload: { a: 1 } });
    expect(decodePayload(Buffer.from('{"a":1}'), 'content-type', 'application/json; charset=utf-8')).toEqual({ ok: true, payload: { a: 1 } });
    expect(decodePayload(Buffer.from('{"a":1}'), 'content-type', 'application/cloudevents+json')).toEqual({ ok: true, payload: { a: 1 } });
    const raw = decodePayload(Buffer.from('bytes'), 'content-type', 'application/octet-stream');
    expect(raw.ok && Buffer.isBuffer(raw.payload)).toBe(true);
    const bad = decodePayload(Buffer.from('{nope'), 'json');
    expect(bad.ok).toBe(false);
    expect(!bad.ok && bad.error.code).toBe('UNPARSEABLE_BODY');
  });

  it('maps every status to exactly one broker action', () => {
    expect(['processed', 'duplicate', 'rejected', 'retry', 'dead-letter', 'conflict'].map((s) => actionFor(s as never))).toEqual([
      'ack',
      'ack',
      'ack',
      'retry',
      'dead-letter',
      'dead-letter',
    ]);
  });

  it('builds dead-letter headers with reason, error and attempt times', () => {
    const first = new Date('2026-01-01T00:00:00Z');
    const headers = deadLetterHeaders(
      {
        status: 'conflict',
        messageId: 'm',
        consumer: 'c',
        reason: 'payload-mismatch',
        attempt: 2,
        firstAttemptAt: first,
        error: new InboxError('PAYLOAD_MISMATCH', 'x'.repeat(5000)),
      },
      new Date('2026-01-02T00:00:00Z'),
    );
    expect(headers).toMatchObject({
      'x-inboxed-reason': 'payload-mismatch',
      'x-inboxed-consumer': 'c',
      'x-inboxed-message-id': 'm',
      'x-inboxed-attempt': '2',
      'x-inboxed-first-attempt-at': '2026-01-01T00:00:00.000Z',
      'x-inboxed-last-attempt-at': '2026-01-02T00:00:00.000Z',
      'x-inboxed-error-code': 'PAYLOAD_MISMATCH',
    });
    expect(headers['x-inboxed-error']).toHaveLength(1024);
  });

  it('drains in-flight work, bounded', async () => {
    const inFlight = new InFlight();
    inFlight.track(new Promise((r) => setTimeout(r, 20)));
    const never = inFlight.track(new Promise(() => {}));
    expect(inFlight.size).toBe(2);
    expect(await inFlight.drain(200)).toBe(1);
    void never;
  });
});
