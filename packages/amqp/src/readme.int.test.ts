import { fileURLToPath } from 'node:url';
import { createTestDatabase, databaseUrl, startQuickStart, waitFor, withSearchPath, type TestDatabase } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { amqpUrl, createTestBroker, type TestBroker } from '../test/amqp-test-broker.js';
import { retryQueueName } from './amqp-topology.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));

// The README's quick start, exactly as written, in its own process against a RabbitMQ where its
// queue does not exist yet and a database where its table does not exist yet.
describe('the README quick start', () => {
  let t: TestDatabase;
  let broker: TestBroker;
  const queues = ['orders', 'orders.dead-letter', ...[1_000, 5_000, 30_000, 120_000, 600_000].map((ms) => retryQueueName('orders', ms))];
  const deleteQueues = async () => {
    for (const queue of queues) await broker.channel.deleteQueue(queue);
  };
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: 'amqp_readme' });
    broker = await createTestBroker();
    await deleteQueues();
  });
  afterEach(async () => {
    await deleteQueues();
    await broker.close();
    await t.close();
  });

  it('runs on a fresh broker and database: one effect per id, invalid payloads dead-lettered, clean SIGTERM', async () => {
    const app = await startQuickStart({
      readme: `${packageDir}README.md`,
      packageDir,
      env: { DATABASE_URL: withSearchPath(databaseUrl(), t.schema), AMQP_URL: amqpUrl() },
      readyLine: 'consuming orders',
    });
    try {
      const order = { orderId: 'o-1', amountCents: 1299 };
      await broker.publish('orders', order, { messageId: 'order-1' });
      await broker.publish('orders', order, { messageId: 'order-1' }); // a redelivery
      await broker.publish('orders', { orderId: 'o-2', amountCents: 'twelve' }, { messageId: 'order-2' });
      await app.waitForOutput('processed order-1');
      await app.waitForOutput('order-2 -> amqp:orders.dead-letter: validation-failed');
      await waitFor(
        'the invalid order dead-lettered and the queue drained',
        async () => (await broker.depth('orders.dead-letter')) === 1 && (await broker.depth('orders')) === 0,
      );
      expect(await t.query(`select id, amount_cents from "${t.schema}".orders`)).toEqual([{ id: 'o-1', amount_cents: 1299 }]);
    } finally {
      expect(await app.stop()).toBe(0);
    }
  });
});
