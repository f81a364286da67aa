import { DRIVERS, type TestDatabase } from '@inboxed/test-support';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { PermanentError } from './errors.js';
import { reject, type InboxMessage } from './types.js';
import { withInboxBatch, type InboxBatchHandler } from './with-inbox-batch.js';

describe.each(DRIVERS)('withInboxBatch on %s', (driver) => {
  const database = useMigratedDatabase(driver);
  let t: TestDatabase;
  beforeEach(() => {
    t = database.t;
  });

  const setBased = vi.fn<InboxBatchHandler<any>>(async (messages, tx) => {
    await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
  });
  const batchProcessor = (handler: InboxBatchHandler<any> = setBased, extra: Record<string, unknown> = {}) =>
    withInboxBatch(handler, { db: t.db, consumer: 'batch-consumer', tables: { schema: t.schema }, backoff: { baseDelayMs: 10 }, ...extra });
  const msgs = (ids: string[]): InboxMessage[] => ids.map((id) => ({ id, payload: { id } }));

  beforeEach(() => {
    setBased.mockClear();
  });

  it('processes a batch in one handler call and reports outcomes in input order', async () => {
    const process = batchProcessor();
    const outcomes = await process(msgs(['c', 'a', 'b']));
    expect(outcomes.map((o) => [o.messageId, o.status])).toEqual([
      ['c', 'processed'],
      ['a', 'processed'],
      ['b', 'processed'],
    ]);
    expect(setBased).toHaveBeenCalledTimes(1);
    expect(await t.countEffects()).toBe(3);
  });

  it('hands the handler only new messages; known ones are duplicates or conflicts', async () => {
    const process = batchProcessor();
    await process(msgs(['a', 'b']));
    setBased.mockClear();
    const outcomes = await process([...msgs(['a', 'c']), { id: 'b', payload: { id: 'changed' } }]);
    expect(outcomes.map((o) => o.status)).toEqual(['duplicate', 'processed', 'conflict']);
    expect(outcomes[2]!.reason).toBe('payload-mismatch');
    expect(setBased).toHaveBeenCalledTimes(1);
    expect(setBased.mock.calls[0]![0].map((m) => m.id)).toEqual(['c']);
    expect(await t.countEffects()).toBe(3);
  });

  it('a batch of only duplicates does not call the handler', async () => {
    const process = batchProcessor();
    await process(msgs(['a']));
    setBased.mockClear();
    expect((await process(msgs(['a']))).map((o) => o.status)).toEqual(['duplicate']);
    expect(setBased).not.toHaveBeenCalled();
  });

  it('a second copy of an id inside one batch is a duplicate, or a conflict when its payload differs', async () => {
    const process = batchProcessor();
    const outcomes = await process([
      { id: 'x', payload: 1 },
      { id: 'x', payload: 1 },
      { id: 'x', payload: 2 },
    ]);
    expect(outcomes.map((o) => [o.status, o.reason])).toEqual([
      ['processed', undefined],
      ['duplicate', 'duplicate-in-batch'],
      ['conflict', 'payload-mismatch'],
    ]);
    expect(await t.countEffects()).toBe(1);
  });

  it('one poison message is isolated: its neighbours commit, it is dead-lettered', async () => {
    const handler = vi.fn<InboxBatchHandler<any>>(async (messages, tx) => {
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      if (messages.some((m) => m.id === 'm-13')) throw new PermanentError('poison');
    });
    const process = batchProcessor(handler);
    const ids = Array.from({ length: 40 }, (_, i) => `m-${i}`);
    const outcomes = await process(msgs(ids));
    expect(outcomes.map((o) => o.messageId)).toEqual(ids);
    const byStatus: Record<string, string[]> = {};
    for (const o of outcomes) byStatus[o.status] = [...(byStatus[o.status] ?? []), o.messageId];
    expect(byStatus['dead-letter']).toEqual(['m-13']);
    expect(byStatus.processed).toHaveLength(39);
    expect(outcomes[13]).toMatchObject({ reason: 'permanent-failure' });
    expect(await t.countEffects()).toBe(39);
    expect(await t.countEffects('m-13')).toBe(0);
  });

  it('a retryable poison message is retried alone while its neighbours commit', async () => {
    const handler = vi.fn<InboxBatchHandler<any>>(async (messages, tx) => {
      if (messages.some((m) => m.id === 'm-2')) throw new Error('flaky dependency');
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
    });
    const outcomes = await batchProcessor(handler)(msgs(['m-0', 'm-1', 'm-2', 'm-3', 'm-4']));
    expect(outcomes.map((o) => o.status)).toEqual(['processed', 'processed', 'retry', 'processed', 'processed']);
    expect(outcomes[2]).toMatchObject({ reason: 'handler-failed', attempt: 1 });
    const attempts = await t.query<{ message_id: string; attempts: number }>(`select message_id, attempts from "${t.schema}".inbox_attempts`);
    expect(attempts).toEqual([{ message_id: 'm-2', attempts: 1 }]);
  });

  it('invalid messages are dead-lettered up front and do not reach the handler', async () => {
    const process = batchProcessor();
    const outcomes = await process([
      { id: 'ok', payload: 1 },
      { id: '', payload: 1 },
      { id: 'x'.repeat(600), payload: 1 },
    ] as InboxMessage[]);
    expect(outcomes.map((o) => [o.status, o.reason ?? null])).toEqual([
      ['processed', null],
      ['dead-letter', 'missing-message-id'],
      ['dead-letter', 'invalid-message-id'],
    ]);
    expect(setBased.mock.calls[0]![0].map((m) => m.id)).toEqual(['ok']);
  });

  it('per-message rejections are recorded and later acked as duplicates', async () => {
    const handler = vi.fn<InboxBatchHandler<any>>(async (messages, tx) => {
      await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id })));
      return new Map([['b', reject('out-of-stock')]]);
    });
    const process = batchProcessor(handler);
    expect((await process(msgs(['a', 'b']))).map((o) => [o.status, o.reason])).toEqual([
      ['processed', undefined],
      ['rejected', 'out-of-stock'],
    ]);
    expect((await process(msgs(['b']))).map((o) => [o.status, o.reason])).toEqual([['duplicate', 'out-of-stock']]);
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('concurrent overlapping batches commit each effect once', async () => {
    const process = batchProcessor();
    const ids = Array.from({ length: 30 }, (_, i) => `id-${i}`);
    const batches = Array.from({ length: 6 }, (_, b) => msgs(ids.filter((_, i) => (i + b) % 2 === 0).reverse()));
    const results = (await Promise.all(batches.map((batch) => process(batch)))).flat();
    expect(results.filter((o) => o.status === 'processed')).toHaveLength(30);
    expect(results.every((o) => o.status === 'processed' || o.status === 'duplicate')).toBe(true);
    expect(await t.countEffects()).toBe(30);
  });
});
