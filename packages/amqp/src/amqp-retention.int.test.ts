import { type InboxError, InboxErrorCodes } from '@inboxed/core';
import type { InboxLogger } from '@inboxed/core/adapter';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AmqpTestKit, createAmqpTestKit } from '../test/amqp-test-kit.js';
import { HARNESS_RETRY_DELAYS_MS } from '../test/harness.js';

const DAY = 86_400_000;

function warningsLogger(): InboxLogger & { warnings: { fields: Record<string, unknown>; message: string }[] } {
  const warnings: { fields: Record<string, unknown>; message: string }[] = [];
  return { warnings, debug() {}, info() {}, error() {}, warn: (fields, message) => void warnings.push({ fields, message: String(message) }) };
}

// The retention guard against the real broker: the horizon is what the consumer declares (AMQP cannot
// read an existing queue's arguments), x-message-ttl plus the longest retry delay.
describe('createAmqpConsumer: retention guard', () => {
  let k: AmqpTestKit;
  let ttlQueue: string;
  // 119 s of x-message-ttl + the harness's longest retry tier (1 s) = a 2 min horizon.
  const queueOptions = { durable: false, messageTtl: 119_000 };
  beforeAll(async () => {
    k = await createAmqpTestKit('amqp_retention');
    ttlQueue = `${k.h.queue}_ttl`;
  });
  afterAll(async () => {
    for (const name of [ttlQueue, ...HARNESS_RETRY_DELAYS_MS.map((ms) => `${ttlQueue}.retry.${ms}`), `${ttlQueue}.dead-letter`])
      await k.h.channel.deleteQueue(name).catch(() => undefined);
    await k.close();
  });

  it('warns with both numbers when the inbox retention is shorter than x-message-ttl + the longest retry delay, and consumes anyway', async () => {
    const logger = warningsLogger();
    const consumer = k.consume(k.processor(), { queue: ttlQueue, queueOptions, inboxRetentionMs: 60_000, logger });
    expect(await consumer.redeliveryHorizon()).toEqual([expect.objectContaining({ kind: 'bounded', ms: 120_000 })]);
    await consumer.start();
    expect(consumer.status().consuming).toBe(true);
    expect(logger.warnings).toHaveLength(1);
    const [warning] = logger.warnings;
    expect(warning?.message).toContain('inbox retention 1min (60000 ms) is shorter than the redelivery horizon of RabbitMQ queue');
    expect(warning?.message).toContain('2min (120000 ms)');
    expect(warning?.fields).toMatchObject({ inboxRetentionMs: 60_000, redeliveryHorizonMs: 120_000 });
    await consumer.stop();
  });

  it('strictRetention: start() rejects with RETENTION_TOO_SHORT and the consumer is not consuming', async () => {
    const consumer = k.consume(k.processor(), { queue: ttlQueue, queueOptions, inboxRetentionMs: 60_000, strictRetention: true, logger: warningsLogger() });
    const error = (await consumer.start().catch((e: unknown) => e)) as InboxError;
    expect(error.code).toBe(InboxErrorCodes.RETENTION_TOO_SHORT);
    expect(error.message).toContain('60000 ms');
    expect(error.message).toContain('120000 ms');
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false });
  });

  it('no warning when the retention outlasts the horizon; a queue it declares without a TTL is unbounded, one it only checks unknown', async () => {
    const quiet = warningsLogger();
    const outlasting = k.consume(k.processor(), { queue: ttlQueue, queueOptions, inboxRetentionMs: 120_000, strictRetention: true, logger: quiet });
    await outlasting.start();
    expect(outlasting.status().consuming).toBe(true);
    await outlasting.stop();
    expect(quiet.warnings).toEqual([]);

    // The harness's work queue was declared durable, without arguments.
    const unbounded = warningsLogger();
    const declared = k.consume(k.processor(), { queueOptions: { durable: true }, inboxRetentionMs: DAY, logger: unbounded });
    await declared.start();
    await declared.stop();
    expect(unbounded.warnings.map((w) => w.message)).toEqual([expect.stringContaining('inbox retention 1d (86400000 ms) is shorter than')]);
    expect(unbounded.warnings[0]?.message).toContain('which is unbounded (the broker keeps messages indefinitely)');

    const checked = k.consume(k.processor(), { inboxRetentionMs: DAY, redeliveryHorizonMs: DAY, strictRetention: true });
    expect(await checked.redeliveryHorizon()).toEqual([expect.objectContaining({ kind: 'unknown', ms: null })]);
    await checked.start();
    await checked.stop();
  });
});
