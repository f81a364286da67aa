import { fileURLToPath } from 'node:url';
import { createTestDatabase, databaseUrl, startQuickStart, waitFor, withSearchPath, type TestDatabase } from '@inboxed/test-support';
import { createKafkaTopic, kafkaBrokers } from '@inboxed/test-support/kafka-topics';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testKafka } from '../test/harness.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));

// The README's quick start, exactly as written, in its own process: topic `payments`, group `ledger`.
describe('the README quick start', () => {
  let t: TestDatabase;
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: 'kafka_readme' });
  });
  afterEach(async () => {
    await t.close();
  });

  it('runs against a fresh database: one ledger entry per message id, offsets committed, clean SIGTERM', async () => {
    const kafka = testKafka();
    await createKafkaTopic(kafka, 'payments', 1);
    const app = await startQuickStart({
      readme: `${packageDir}README.md`,
      packageDir,
      env: { DATABASE_URL: withSearchPath(databaseUrl(), t.schema), KAFKA_BROKERS: kafkaBrokers().join(',') },
      readyLine: 'consuming payments',
    });
    const producer = kafka.producer();
    const admin = kafka.admin();
    try {
      await producer.connect();
      await admin.connect();
      await producer.send({
        topic: 'payments',
        acks: -1,
        messages: [
          { headers: { 'message-id': 'pay-1' }, value: JSON.stringify({ amountCents: 500 }) },
          { headers: { 'message-id': 'pay-1' }, value: JSON.stringify({ amountCents: 500 }) },
          { headers: { 'message-id': 'pay-2' }, value: JSON.stringify({ amountCents: 700 }) },
        ],
      });
      await app.waitForOutput('processed pay-2', 30_000);
      await waitFor(
        'offsets committed past all three records',
        async () => {
          const [entry] = await admin.fetchOffsets({ groupId: 'ledger', topics: ['payments'] });
          return entry?.partitions.find((p) => p.partition === 0)?.offset === '3';
        },
        30_000,
      );
      expect(await t.query(`select payment_id, amount_cents from "${t.schema}".ledger_entries order by 1`)).toEqual([
        { payment_id: 'pay-1', amount_cents: 500 },
        { payment_id: 'pay-2', amount_cents: 700 },
      ]);
    } finally {
      await producer.disconnect();
      await admin.disconnect();
      expect(await app.stop()).toBe(0);
    }
  });
});
