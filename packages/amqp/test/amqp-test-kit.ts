import { type AnyInboxProcessor, type InboxMessage, type InboxOptions, migrate, withInbox, withInboxBatch } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';
import { createOutcomeRecorder, type OutcomeRecorder } from '@inboxed/core/testing';
import { createTestDatabase, type TestDatabase } from '@inboxed/test-support';
import type { AmqpConsumerOptions } from '../src/index.js';
import { type AmqpHarness, createHarness } from './harness.js';

/** One RabbitMQ-specific test's world: the conformance harness (its own queues), a migrated schema, a recorder. */
export interface AmqpTestKit {
  h: AmqpHarness;
  t: TestDatabase;
  recorder: OutcomeRecorder;
  /** The inbox consumer name (dedup scope) of the kit's processors. */
  consumerName: string;
  /** Per-message processor writing one `effects` row per message, after `before` (which may throw). */
  processor(before?: (message: InboxMessage) => unknown, extra?: Partial<InboxOptions<any>>): ReturnType<typeof withInbox>;
  /** Batch processor writing one `effects` row per message, after `before` per message. */
  batchProcessor(before?: (message: InboxMessage) => unknown): ReturnType<typeof withInboxBatch>;
  /** A harness consumer (errors are expected in fault tests: listened to), stopped by `close()`. */
  consume(handler: AnyInboxProcessor, options?: Partial<AmqpConsumerOptions>): InboxConsumer;
  /** Rows of `effects` per message id. */
  effectsPerMessage(): Promise<Map<string, number>>;
  close(): Promise<void>;
}

export async function createAmqpTestKit(label: string): Promise<AmqpTestKit> {
  const t = await createTestDatabase('node-postgres', { label, poolSize: 20 });
  await migrate(t.db, { schema: t.schema });
  const h = createHarness();
  await h.setup();
  const recorder = createOutcomeRecorder();
  const consumerName = `${label}-consumer`;
  const consumers: InboxConsumer[] = [];
  const inboxOptions = { db: t.db, consumer: consumerName, tables: { schema: t.schema }, backoff: { baseDelayMs: 100, maxDelayMs: 400 } };
  return {
    h,
    t,
    recorder,
    consumerName,
    processor: (before, extra = {}) =>
      recorder.wrap(
        withInbox(
          async (message, tx: any) => {
            await before?.(message);
            await tx.insert(t.effects).values({ messageId: message.id, value: message.payload });
          },
          { ...inboxOptions, ...extra },
        ),
      ),
    batchProcessor: (before) =>
      recorder.wrap(
        withInboxBatch(async (messages, tx: any) => {
          for (const message of messages) await before?.(message);
          await tx.insert(t.effects).values(messages.map((m) => ({ messageId: m.id, value: m.payload })));
        }, inboxOptions),
      ),
    consume(handler, options) {
      const consumer = h.consumer(handler, options);
      consumer.on('error', () => {});
      consumers.push(consumer);
      return consumer;
    },
    async effectsPerMessage() {
      const rows = await t.query<{ message_id: string; n: number }>(`select message_id, count(*)::int as n from "${t.schema}".effects group by message_id`);
      return new Map(rows.map((r) => [r.message_id, Number(r.n)]));
    },
    async close() {
      for (const consumer of consumers) await consumer.stop().catch(() => undefined);
      await h.teardown();
      await t.close();
    },
  };
}
