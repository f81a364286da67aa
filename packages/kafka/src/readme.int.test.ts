import { fileURLToPath } from 'node:url';
import { createTestDatabase, databaseUrl, startQuickStart, waitFor, withSearchPath, type TestDatabase } from '@inboxed/test-support';
import { kafkaBrokers } from '@inboxed/test-support/kafka-topics';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { committedOffsets, createTopic, produce, testKafka } from '../test/kafka-test-kit.js';

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
    await createTopic(kafka, 'payments', 1);
    const app = await startQuickStart({
      readme: `${packageDir}README.md`,
      packageDir,
      env: { DATABASE_URL: withSearchPath(databaseUrl(), t.schema), KAFKA_BROKERS: kafkaBrokers().join(',') },
      readyLine: 'consuming payments',
    });
    try {
      await produce(kafka, 'payments', [
        { id: 'pay-1', value: { amountCents: 500 } },
        { id: 'pay-1', value: { amountCents: 500 } },
        { id: 'pay-2', value: { amountCents: 700 } },
      ]);
      await app.waitForOutput('processed pay-2', 30_000);
      await waitFor('offsets committed past all three records', async () => (await committedOffsets(kafka, 'ledger', 'payments'))[0] === 3, 30_000);
      expect(await t.query(`select payment_id, amount_cents from "${t.schema}".ledger_entries order by 1`)).toEqual([
        { payment_id: 'pay-1', amount_cents: 500 },
        { payment_id: 'pay-2', amount_cents: 700 },
      ]);
    } finally {
      expect(await app.stop()).toBe(0);
    }
  });
});
