import { type InboxError, InboxErrorCodes, migrate, withInbox } from '@inboxed/core';
import type { InboxConsumer, InboxLogger } from '@inboxed/core/adapter';
import { createTestDatabase, type TestDatabase } from '@inboxed/test-support';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createKafkaConsumer, type KafkaConsumerOptions } from '../src/index.js';
import { createHarness, type KafkaHarness } from '../test/harness.js';

const DAY = 86_400_000;

function warningsLogger(): InboxLogger & { warnings: { fields: Record<string, unknown>; message: string }[] } {
  const warnings: { fields: Record<string, unknown>; message: string }[] = [];
  return { warnings, debug() {}, info() {}, error() {}, warn: (fields, message) => void warnings.push({ fields, message: String(message) }) };
}

// The retention guard against the test broker. librdkafka's mock cluster (the default here) has no
// DescribeConfigs API, so there the topic's horizon is `unknown` and the numbers come from
// redeliveryHorizonMs; against a real Kafka (KAFKA_BROKERS) the topic's retention.ms + segment.ms
// (7d + 7d by default) is read. The formatting of both numbers is unit-tested in core.
describe('createKafkaConsumer: retention guard', () => {
  const mock = inject('kafkaMockControl') !== '';
  // One schema and topic for the whole describe: a group join costs seconds on the mock, setups too.
  let t: TestDatabase;
  let h: KafkaHarness;
  const consumers: InboxConsumer[] = [];
  beforeAll(async () => {
    t = await createTestDatabase('node-postgres', { label: 'kafka_retention' });
    await migrate(t.db, { schema: t.schema });
    h = createHarness();
    await h.setup();
  });
  afterAll(async () => {
    await Promise.all(consumers.map((consumer) => consumer.stop()));
    await h.teardown();
    await t.close();
  });
  const consumer = (extra: Partial<KafkaConsumerOptions>) => {
    const handler = withInbox(async () => {}, { db: t.db, consumer: 'retention', tables: { schema: t.schema } });
    const created = createKafkaConsumer({ ...h.options(handler), ...extra });
    consumers.push(created);
    return created;
  };

  it('reads the topic horizon through the admin API, and warns with both numbers (redeliveryHorizonMs when the broker cannot say)', async () => {
    const [horizon] = await consumer({ inboxRetentionMs: DAY }).redeliveryHorizon();
    if (mock) {
      expect(horizon).toMatchObject({ kind: 'unknown', ms: null, source: `kafka topic ${h.topic}` });
      expect(horizon?.detail).toContain('DescribeConfigs failed');
    } else {
      expect(horizon).toMatchObject({ kind: 'bounded', source: `kafka topic ${h.topic} retention.ms + segment.ms` });
    }

    const logger = warningsLogger();
    const started = consumer({ inboxRetentionMs: DAY, redeliveryHorizonMs: 2 * DAY, logger });
    await started.start();
    expect(started.status().state).toBe('running');
    expect(logger.warnings.map((w) => w.message)).toEqual([
      expect.stringContaining('inbox retention 1d (86400000 ms) is shorter than the redelivery horizon of option redeliveryHorizonMs 2d (172800000 ms)'),
    ]);
  });

  it('strictRetention: start() rejects with RETENTION_TOO_SHORT (an unreadable horizon too) and the consumer is not consuming', async () => {
    const refused = consumer({ inboxRetentionMs: DAY, strictRetention: true });
    const error = (await refused.start().catch((e: unknown) => e)) as InboxError;
    expect(error.code).toBe(InboxErrorCodes.RETENTION_TOO_SHORT);
    expect(error.message).toContain(`inbox retention 1d (86400000 ms) is shorter than the redelivery horizon of kafka topic ${h.topic}`);
    expect(error.message).toContain(mock ? 'which could not be read' : 'retention.ms + segment.ms');
    expect(refused.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false });
  });

  it('no warning when the inbox retention outlasts the horizon', async () => {
    const logger = warningsLogger();
    // A group of its own: the first test's consumer still holds the harness group.
    const outlasting = consumer({ groupId: `${h.groupId}_outlasting`, inboxRetentionMs: 3 * DAY, redeliveryHorizonMs: 2 * DAY, strictRetention: true, logger });
    await outlasting.start();
    expect(outlasting.status().state).toBe('running');
    expect(logger.warnings).toEqual([]);
  });
});
