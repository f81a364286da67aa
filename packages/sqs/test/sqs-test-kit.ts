// Per-test plumbing of the package's SQS-specific tests, on top of the conformance harness
// (test/harness.ts): a fresh schema, queues per harness, consumers stopped and queues deleted
// afterwards, every `error` event collected.
import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import { type InboxError, type InboxMessage, type InboxProcessor, migrate, withInbox } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';
import { createTestDatabase, type TestDatabase, waitFor } from '@inboxed/test-support';
import { afterEach, beforeEach } from 'vitest';
import { createSqsConsumer, type SqsConsumerOptions } from '../src/index.js';
import { createHarness, type SqsHarness, type SqsHarnessOptions } from './harness.js';

export { queueDepth, sqsClient } from './sqs-queues.js';

/** Resolves with the harness's dead-letter messages once there are at least `count`. */
export function deadLettersOf(h: SqsHarness, count = 1, timeoutMs = 20_000): Promise<Message[]> {
  return waitFor(
    `${count} dead-letter(s)`,
    async () => {
      const messages = await h.deadLetterMessages();
      return messages.length >= count ? messages : undefined;
    },
    timeoutMs,
  );
}

export type Handler = (message: InboxMessage, tx: any) => Promise<unknown> | unknown;

export interface SqsTestContext {
  t: TestDatabase;
  consumers: InboxConsumer[];
  errors: InboxError[];
  /** Inserts one `effects` row per message (payload as `value`). */
  insertEffect: Handler;
  /** A `withInbox` processor on the test schema, consumer `notifications`; backoff 1 s doubling, no jitter. */
  inbox(handler?: Handler, extra?: Record<string, unknown>): InboxProcessor;
  /** Queues of a new harness, set up now and torn down after the test. */
  queues(options?: SqsHarnessOptions): Promise<SqsHarness>;
  /** Creates, tracks and starts a consumer of `h` (its test options, then `options`); errors are collected. */
  start(h: SqsHarness, options: Partial<SqsConsumerOptions> & Pick<SqsConsumerOptions, 'handler'>, client?: SQSClient): Promise<InboxConsumer>;
}

/** Call at the top of a `describe`. */
export function sqsTestContext(): SqsTestContext {
  const harnesses: SqsHarness[] = [];
  const ctx: SqsTestContext = {
    t: undefined as unknown as TestDatabase,
    consumers: [],
    errors: [],
    insertEffect: async (message, tx) => {
      await tx.insert(ctx.t.effects).values({ messageId: message.id, value: message.payload });
    },
    inbox(handler = ctx.insertEffect, extra = {}) {
      return withInbox(handler as never, {
        db: ctx.t.db,
        consumer: 'notifications',
        tables: { schema: ctx.t.schema },
        backoff: { baseDelayMs: 1000, jitter: 'none' },
        ...extra,
      });
    },
    async queues(options) {
      const h = createHarness(options);
      harnesses.push(h);
      await h.setup();
      return h;
    },
    async start(h, options, client) {
      const consumer = createSqsConsumer(h.consumerOptions(options.handler, { ...options, ...(client === undefined ? {} : { client }) }));
      consumer.on('error', (error) => ctx.errors.push(error));
      ctx.consumers.push(consumer);
      await consumer.start();
      return consumer;
    },
  };
  beforeEach(async () => {
    ctx.t = await createTestDatabase('node-postgres', { label: 'sqs', poolSize: 10 });
    await migrate(ctx.t.db, { schema: ctx.t.schema });
    ctx.errors.length = 0;
  });
  afterEach(async () => {
    await Promise.all(ctx.consumers.splice(0).map((c) => c.stop()));
    for (const h of harnesses.splice(0)) await h.teardown();
    await ctx.t.close();
  });
  return ctx;
}
