import { migrate } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';
import { createTestDatabase, type TestDatabase } from '@inboxed/test-support';
import { afterEach, beforeEach } from 'vitest';
import { createKafkaConsumer, type KafkaConsumerOptions } from '../src/index.js';
import { createHarness, type KafkaHarness } from './harness.js';

/** One Kafka-specific test's world, renewed before each test and torn down after it. */
export interface KafkaTestKit {
  /** The harness: this test's topic, dead-letter topic and group. */
  readonly h: KafkaHarness;
  /** A migrated schema of its own. */
  readonly t: TestDatabase;
  /** Starts a consumer of the harness topic (stopped after the test). */
  start(handler: KafkaConsumerOptions['handler'], extra?: Partial<KafkaConsumerOptions>): Promise<InboxConsumer>;
  /** Registers a consumer to stop after the test. */
  track(consumer: InboxConsumer): InboxConsumer;
  /** Effect message ids in the order they were applied. */
  applied(): Promise<string[]>;
}

/** Sets up a {@link KafkaTestKit} around every test of the calling `describe`. */
export function useKafkaTestKit(options: { partitions?: number; label?: string } = {}): KafkaTestKit {
  let h: KafkaHarness | undefined;
  let t: TestDatabase | undefined;
  const running: InboxConsumer[] = [];
  beforeEach(async () => {
    t = await createTestDatabase('node-postgres', { label: options.label ?? 'kafka' });
    await migrate(t.db, { schema: t.schema });
    h = createHarness(options.partitions === undefined ? {} : { partitions: options.partitions });
    await h.setup();
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((consumer) => consumer.stop()));
    await h?.teardown();
    await t?.close();
  });
  const kit: KafkaTestKit = {
    get h() {
      return h!;
    },
    get t() {
      return t!;
    },
    track(consumer) {
      running.push(consumer);
      return consumer;
    },
    async start(handler, extra = {}) {
      const consumer = kit.track(createKafkaConsumer({ ...kit.h.options(handler), ...extra }));
      await consumer.start();
      return consumer;
    },
    async applied() {
      return (await kit.t.query<{ message_id: string }>(`select message_id from "${kit.t.schema}".effects order by id`)).map((r) => r.message_id);
    },
  };
  return kit;
}
