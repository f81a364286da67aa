import { describe, expect, it } from 'vitest';
import type { InboxError } from '../errors.js';
import type { AnyInboxProcessor, InboxMessage, InboxOutcome } from '../types.js';
import { ConsumerEventEmitter } from './events.js';
import type { InboxLogger } from './logger.js';
import { callProcessor } from './processor-call.js';

const silent: InboxLogger = { debug() {}, info() {}, warn() {}, error() {} };
const messages: InboxMessage[] = [
  { id: 'a', payload: {}, attempt: 2 },
  { id: 'b', payload: {} },
];
const processed = (m: InboxMessage): InboxOutcome => ({ status: 'processed', messageId: String(m.id), consumer: 'c' });
const single = (fn: (m: InboxMessage, o?: { signal?: AbortSignal }) => Promise<InboxOutcome>): AnyInboxProcessor =>
  Object.assign(fn, { kind: 'single' as const, consumer: 'c', checkTables: async () => {}, observe: () => {} });
const batch = (fn: (ms: readonly InboxMessage[]) => Promise<InboxOutcome[]>): AnyInboxProcessor =>
  Object.assign(fn, { kind: 'batch' as const, consumer: 'c', checkTables: async () => {}, observe: () => {} });

describe('callProcessor', () => {
  it('hands every call the consumer signal and returns outcomes in input order', async () => {
    const signal = new AbortController().signal;
    const seen: (AbortSignal | undefined)[] = [];
    const outcomes = await callProcessor(
      single(async (m, o) => {
        seen.push(o?.signal);
        return processed(m);
      }),
      messages,
      signal,
      new ConsumerEventEmitter(silent),
    );
    expect(outcomes.map((o) => o.messageId)).toEqual(['a', 'b']);
    expect(seen).toEqual([signal, signal]);
  });

  it('a throwing processor leaves its delivery to retry as processor-threw, uncounted, never acked; others are unaffected', async () => {
    const outcomes = await callProcessor(
      single(async (m) => {
        if (m.id === 'a') throw new Error('middleware bug');
        return processed(m);
      }),
      messages,
      undefined,
      new ConsumerEventEmitter(silent),
    );
    expect(outcomes[0]).toMatchObject({ status: 'retry', reason: 'processor-threw', attempt: 2, error: { code: 'PROCESSOR_THREW', messageIds: ['a'] } });
    expect(outcomes[0]!.error!.message).toContain('middleware bug');
    expect(outcomes[1]).toMatchObject({ status: 'processed' });
  });

  it('a batch processor that throws or miscounts leaves every unanswered delivery to retry', async () => {
    const events = new ConsumerEventEmitter(silent);
    const threw = await callProcessor(
      batch(async () => {
        throw new Error('boom');
      }),
      messages,
      undefined,
      events,
    );
    expect(threw.map((o) => [o.status, o.reason])).toEqual([
      ['retry', 'processor-threw'],
      ['retry', 'processor-threw'],
    ]);
    const short = await callProcessor(
      batch(async (ms) => [processed(ms[0]!)]),
      messages,
      undefined,
      events,
    );
    expect(short.map((o) => [o.status, o.reason])).toEqual([
      ['processed', undefined],
      ['retry', 'processor-threw'],
    ]);
    expect(short[1]!.error!.message).toContain('returned 1 outcomes for 2 messages');
  });

  it('raises one rate-limited error event when the retries are settled, not one per throw', async () => {
    const events = new ConsumerEventEmitter(silent);
    const errors: InboxError[] = [];
    events.on('error', (error) => errors.push(error));
    const throwing = single(async () => {
      throw new Error('middleware bug');
    });
    for (let i = 0; i < 3; i++) {
      for (const outcome of await callProcessor(throwing, messages, undefined, events)) events.emitOutcome(outcome, new Date());
    }
    expect(errors.map((e) => [e.code, e.details.retriesSinceLastReport])).toEqual([['PROCESSOR_THREW', 1]]);
  });

  it.each([
    ['undefined (a wrapper that forgot to return the outcome)', () => undefined],
    ['a string', () => 'processed'],
    ['an unknown status', () => ({ status: 'done', messageId: 'a', consumer: 'c' })],
    ['a retry without an error', () => ({ status: 'retry', messageId: 'a', consumer: 'c', reason: 'handler-failed', retryAfterMs: 5 })],
    ['a retry without a wait', () => ({ status: 'retry', messageId: 'a', consumer: 'c', reason: 'x', error: new Error('x') })],
    [
      'an object whose status getter throws',
      () => ({
        get status(): never {
          throw new Error('getter');
        },
      }),
    ],
  ])('a per-message processor resolving to %s leaves that delivery to retry as processor-threw; others are unaffected', async (_label, value) => {
    const outcomes = await callProcessor(
      single(async (m) => (m.id === 'a' ? (value() as InboxOutcome) : processed(m))),
      messages,
      undefined,
      new ConsumerEventEmitter(silent),
    );
    expect(outcomes[0]).toMatchObject({ status: 'retry', reason: 'processor-threw', messageId: 'a', error: { code: 'PROCESSOR_THREW' } });
    expect(outcomes[1]).toMatchObject({ status: 'processed', messageId: 'b' });
  });

  it('a batch processor with one malformed outcome: only that delivery retries as processor-threw', async () => {
    const outcomes = await callProcessor(
      batch(async (ms) => ms.map((m) => (m.id === 'b' ? (null as unknown as InboxOutcome) : processed(m)))),
      messages,
      undefined,
      new ConsumerEventEmitter(silent),
    );
    expect(outcomes.map((o) => [o.messageId, o.status, o.reason])).toEqual([
      ['a', 'processed', undefined],
      ['b', 'retry', 'processor-threw'],
    ]);
  });
});
