import { fileURLToPath } from 'node:url';
import { createTestDatabase, databaseUrl, requireService, startQuickStart, type TestDatabase, waitFor, withSearchPath } from '@inboxed/test-support';
import type {} from '@inboxed/test-support/amqp-setup';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_RETRY_DELAYS_MS, retryQueueName } from './amqp-retry.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));

// The README's quick start, exactly as written, in its own process against a RabbitMQ where its
// queues do not exist yet (it must declare what it needs) and a database where its table does not.
describe('the README quick start', () => {
  let t: TestDatabase;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  const queues = ['orders', 'orders.dead-letter', ...DEFAULT_RETRY_DELAYS_MS.map((ms) => retryQueueName('orders', ms))];
  const deleteQueues = async () => {
    for (const queue of queues) await channel.deleteQueue(queue);
  };
  const depth = async (queue: string) => (await channel.checkQueue(queue)).messageCount;
  const publish = async (body: unknown, messageId: string) => {
    channel.sendToQueue('orders', Buffer.from(JSON.stringify(body)), { messageId, contentType: 'application/json', persistent: true });
    await channel.waitForConfirms();
  };
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: 'amqp_readme' });
    connection = await amqp.connect(requireService('amqpUrl'));
    connection.on('error', () => {});
    channel = await connection.createConfirmChannel();
    await deleteQueues();
  });
  afterEach(async () => {
    await deleteQueues();
    await connection.close();
    await t.close();
  });

  it('runs on a fresh broker and database: one effect per id, invalid payloads dead-lettered, clean SIGTERM', async () => {
    const app = await startQuickStart({
      readme: `${packageDir}README.md`,
      packageDir,
      env: { DATABASE_URL: withSearchPath(databaseUrl(), t.schema), AMQP_URL: requireService('amqpUrl') },
      readyLine: 'consuming orders',
    });
    try {
      const order = { orderId: 'o-1', amountCents: 1299 };
      await publish(order, 'order-1');
      await publish(order, 'order-1'); // a redelivery
      await publish({ orderId: 'o-2', amountCents: 'twelve' }, 'order-2');
      await app.waitForOutput('processed order-1');
      await app.waitForOutput('order-2 -> amqp:orders.dead-letter: validation-failed');
      await waitFor(
        'the invalid order dead-lettered and the queue drained',
        async () => (await depth('orders.dead-letter')) === 1 && (await depth('orders')) === 0,
      );
      expect(await t.query(`select id, amount_cents from "${t.schema}".orders`)).toEqual([{ id: 'o-1', amount_cents: 1299 }]);
    } finally {
      expect(await app.stop()).toBe(0);
    }
  });
});
