// Type-level tests, checked by `tsc` (pnpm typecheck): how payload types flow from options to the
// handler, and what an outcome guarantees per status. Nothing here runs.
import { expectTypeOf } from 'vitest';
import type { PgliteDatabase } from 'drizzle-orm/pglite';
import type { InboxConsumer } from './adapter/contract.js';
import type { InboxError } from './errors.js';
import type { StandardSchemaV1 } from './standard-schema.js';
import type { InboxBatchProcessor, InboxMessage, InboxOutcome, InboxProcessor, OutcomeReason } from './types.js';
import { withInbox } from './with-inbox.js';
import { withInboxBatch } from './with-inbox-batch.js';
import { wrapProcessor } from './wrap-processor.js';
import { storeResult } from './stored-result.js';

declare const db: PgliteDatabase;
interface Order {
  id: string;
  amountCents: number;
}
/** A Standard Schema the way zod/valibot/arktype declare theirs. */
declare const OrderSchema: StandardSchemaV1<{ id: string; amountCents: number | string }, Order>;
/** A zod-style parse: a second optional parameter the processor never passes. */
declare const parseOrder: (data: unknown, params?: { reportInput?: boolean }) => Order;

// schema: the handler's payload is the schema's output, without annotating anything.
withInbox(
  async (message) => {
    expectTypeOf(message.payload).toEqualTypeOf<Order>();
  },
  { db, consumer: 'c', schema: OrderSchema },
);

withInboxBatch(
  async (messages) => {
    expectTypeOf(messages).toEqualTypeOf<InboxMessage<Order>[]>();
  },
  { db, consumer: 'c', schema: OrderSchema },
);

// parse: zod's `Order.parse` (with its optional second parameter) is accepted as is.
withInbox(
  async (message) => {
    expectTypeOf(message.payload).toEqualTypeOf<Order>();
  },
  { db, consumer: 'c', parse: parseOrder },
);

// An async parse types the payload as what it resolves to.
withInbox(
  async (message) => {
    expectTypeOf(message.payload).toEqualTypeOf<Order>();
  },
  { db, consumer: 'c', parse: async (value: unknown) => value as Order },
);

// No validator: unknown, unless stated explicitly.
withInbox(
  async (message) => {
    expectTypeOf(message.payload).toEqualTypeOf<unknown>();
  },
  { db, consumer: 'c' },
);
withInbox<typeof db, Order>(
  async (message) => {
    expectTypeOf(message.payload).toEqualTypeOf<Order>();
  },
  { db, consumer: 'c' },
);

// The schema decides; a handler claiming another payload type is an error on the handler.
withInbox(
  // @ts-expect-error the payload is an Order, not a number
  async (message: InboxMessage<number>) => void message,
  { db, consumer: 'c', schema: OrderSchema },
);

// The transaction is the user's own database's.
withInbox(
  async (_message, tx) => {
    expectTypeOf(tx.insert).toBeFunction();
  },
  { db, consumer: 'c' },
);

// Outcomes: narrowing on status gives what that status always has.
declare const outcome: InboxOutcome;
if (outcome.status === 'retry') {
  expectTypeOf(outcome.retryAfterMs).toEqualTypeOf<number>();
  expectTypeOf(outcome.error).toEqualTypeOf<InboxError>();
}
if (outcome.status === 'dead-letter' || outcome.status === 'conflict') {
  expectTypeOf(outcome.reason).toExtend<string>();
  expectTypeOf(outcome.error).toEqualTypeOf<InboxError>();
}
if (outcome.status === 'rejected') expectTypeOf(outcome.reason).toEqualTypeOf<string>();
// A retry without retryAfterMs is not an outcome.
// @ts-expect-error retryAfterMs is required on a retry
const incomplete: InboxOutcome = { status: 'retry', messageId: 'm', consumer: 'c', reason: 'handler-failed', error: null as unknown as InboxError };
void incomplete;

// Middleware: a wrapped processor is still a processor of the same kind.
declare const single: InboxProcessor;
declare const batch: InboxBatchProcessor;
declare const observeDuration: (status: InboxOutcome['status'], ms: number) => void;
const timed = wrapProcessor(single, async (message, next) => {
  const started = performance.now();
  const result = await next(message);
  observeDuration(result.status, performance.now() - started);
  return result;
});
expectTypeOf(timed).toEqualTypeOf<InboxProcessor>();
expectTypeOf(wrapProcessor(batch, async (messages, next) => next(messages))).toEqualTypeOf<InboxBatchProcessor>();

// Leased mode: the context is the leased one, the payload comes from the schema, results are typed.
withInbox(
  async (message, context) => {
    expectTypeOf(message.payload).toEqualTypeOf<Order>();
    context.idempotencyKey satisfies string;
    context.fencingToken satisfies number;
    context.takeover satisfies boolean;
    await context.renewLease();
    context.complete(async (tx) => {
      await tx.execute('select 1');
    });
    return storeResult({ chargeId: 'ch_1' });
  },
  { db, consumer: 'billing.charge', mode: 'leased', leaseMs: 10_000, schema: OrderSchema },
);
// @ts-expect-error a leased handler gets no transaction: its second argument is the context
withInbox(async (_message, _tx: { insert: unknown }) => {}, { db, consumer: 'c', mode: 'leased' });

// Broker events: each listener gets the outcome its event stands for, so the fields the outcome
// table promises for that status need no check.
declare const consumer: InboxConsumer;
consumer.on('dead_letter', (outcome, destination) => {
  expectTypeOf(outcome.reason).toEqualTypeOf<OutcomeReason>();
  expectTypeOf(outcome.error).toEqualTypeOf<InboxError>();
  expectTypeOf(destination).toEqualTypeOf<string>();
});
consumer.on('retry', (outcome) => {
  expectTypeOf(outcome.retryAfterMs).toEqualTypeOf<number>();
});
consumer.on('busy', (outcome) => {
  expectTypeOf(outcome.retryAfterMs).toEqualTypeOf<number>();
});
consumer.on('message_processed', (outcome) => {
  expectTypeOf(outcome.status).toEqualTypeOf<'processed' | 'rejected'>();
});
consumer.on('duplicate', (outcome) => {
  expectTypeOf(outcome.status).toEqualTypeOf<'duplicate'>();
});
