import { type InboxError, InboxErrorCodes } from '@inboxed/core';
import type { InboxLogger } from '@inboxed/core/adapter';
import { describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { sqsTestContext } from '../test/sqs-test-kit.js';

function warningsLogger(): InboxLogger & { warnings: { fields: Record<string, unknown>; message: string }[] } {
  const warnings: { fields: Record<string, unknown>; message: string }[] = [];
  return { warnings, debug() {}, info() {}, error() {}, warn: (fields, message) => void warnings.push({ fields, message: String(message) }) };
}

// The retention guard against the SQS emulator: the horizon is the queue's MessageRetentionPeriod.
describe('createSqsConsumer: retention guard', () => {
  const ctx = sqsTestContext();
  const oneHour = { attributes: { MessageRetentionPeriod: '3600' } };

  it('warns with both numbers when the inbox retention is shorter than MessageRetentionPeriod, and consumes anyway', async () => {
    const h = await ctx.queues(oneHour);
    const logger = warningsLogger();
    const consumer = await ctx.start(h, { handler: ctx.inbox(), inboxRetentionMs: 600_000, logger });
    expect(consumer.status().consuming).toBe(true);
    expect(await consumer.redeliveryHorizon()).toEqual([expect.objectContaining({ kind: 'bounded', ms: 3_600_000 })]);
    expect(logger.warnings).toHaveLength(1);
    expect(logger.warnings[0]?.message).toContain(
      'inbox retention 10min (600000 ms) is shorter than the redelivery horizon of SQS queue ' +
        `${h.queueUrl.split('/').pop()} MessageRetentionPeriod 1h (3600000 ms)`,
    );
    expect(logger.warnings[0]?.fields).toMatchObject({ inboxRetentionMs: 600_000, redeliveryHorizonMs: 3_600_000 });
  });

  it('strictRetention: start() rejects with RETENTION_TOO_SHORT and the consumer is not consuming', async () => {
    const h = await ctx.queues(oneHour);
    const consumer = createSqsConsumer(h.consumerOptions(ctx.inbox(), { inboxRetentionMs: 600_000, strictRetention: true }));
    ctx.consumers.push(consumer);
    const error = (await consumer.start().catch((e: unknown) => e)) as InboxError;
    expect(error.code).toBe(InboxErrorCodes.RETENTION_TOO_SHORT);
    expect(error.message).toContain('600000 ms');
    expect(error.message).toContain('3600000 ms');
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false });
  });

  it('no warning when the inbox retention outlasts MessageRetentionPeriod', async () => {
    const h = await ctx.queues(oneHour);
    const logger = warningsLogger();
    const consumer = await ctx.start(h, { handler: ctx.inbox(), inboxRetentionMs: 3_600_000, strictRetention: true, logger });
    expect(consumer.status().consuming).toBe(true);
    expect(logger.warnings).toEqual([]);
  });
});
