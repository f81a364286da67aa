import { migrate, withInbox, withInboxBatch, type InboxMessage, type InboxOptions } from '@inboxed/core';
import { createOutcomeRecorder, type OutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, uniqueName, type TestDatabase } from '@inboxed/test-support';
import { createAmqpConsumer, type AmqpConsumer, type AmqpConsumerOptions } from '../src/index.js';
import { amqpUrl, createTestBroker, type TestBroker } from './amqp-test-broker.js';

/** One test's world: its own PG schema (migrated), its own queue, a broker connection, a recorder. */
export interface AmqpFixture {
  t: TestDatabase;
  broker: TestBroker;
  queue: string;
  consumer: string;
  recorder: OutcomeRecorder;
  /** Per-message processor writing one `effects` row per message (plus `before` hook). */
  processor(before?: (message: InboxMessage) => void | Promise<void>, extra?: Partial<InboxOptions<any>>): ReturnType<typeof withInbox>;
  /** Batch processor writing one `effects` row per message (plus `before` hook per message). */
  batchProcessor(before?: (message: InboxMessage) => void | Promise<void>): ReturnType<typeof withInboxBatch>;
  /** A consumer on the fixture's queue, stopped by `close()`. */
  consume(options: Partial<AmqpConsumerOptions> & Pick<AmqpConsumerOptions, 'handler'>): AmqpConsumer;
  /** Rows of `effects` grouped by message id. */
  effectsPerMessage(): Promise<Map<string, number>>;
  close(): Promise<void>;
}

export async function createAmqpFixture(label: string): Promise<AmqpFixture> {
  const t = await createTestDatabase('node-postgres', { label, poolSize: 20 });
  await migrate(t.db, { schema: t.schema });
  const broker = await createTestBroker();
  const queue = await broker.declareQueue(uniqueName(label));
  const consumer = `${label}-consumer`;
  const recorder = createOutcomeRecorder();
  const consumers: AmqpConsumer[] = [];
  const inboxOptions = { db: t.db, consumer, tables: { schema: t.schema }, backoff: { baseDelayMs: 100, maxDelayMs: 400 } };
  return {
    t,
    broker,
    queue,
    consumer,
    recorder,
    processor(before, extra = {}) {
      return recorder.wrap(
        withInbox(
          async (message, tx: any) => {
            await before?.(message);
            await tx.insert(t.effects).values({ messageId: message.id, value: message.payload });
          },
          { ...inboxOptions, ...extra },
        ),
      );
    },
    batchProcessor(before) {
      return recorder.wrap(
        withInboxBatch(async (messages, tx: any) => {
          for (const message of messages) await before?.(message);
          await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
        }, inboxOptions),
      );
    },
    consume(options) {
      const created = createAmqpConsumer({ url: amqpUrl(), queue, retryDelaysMs: [300, 600], stopTimeoutMs: 5000, ...options });
      created.on('error', () => {}); // tests assert outcomes; errors are expected in fault tests
      consumers.push(created);
      return created;
    },
    async effectsPerMessage() {
      const rows = await t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${t.schema}".effects group by message_id`);
      return new Map(rows.map((r) => [r.message_id, Number(r.n)]));
    },
    async close() {
      for (const c of consumers) await c.stop().catch(() => undefined);
      await broker.close();
      await t.close();
    },
  };
}
