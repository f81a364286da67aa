/**
 * @inboxed/sqs: Amazon SQS adapter for inboxed. Polls a queue with `@aws-sdk/client-sqs`, runs each
 * message through an inbox processor, deletes only after the outcome is final, turns retries into
 * visibility-timeout backoff, keeps slow handlers invisible with heartbeats, keeps FIFO groups in
 * order and dead-letters with reason attributes.
 *
 * @packageDocumentation
 */

/** The SQS consumer: `createSqsConsumer(options)` returns an `InboxConsumer` (`start`, `stop`, `status`, `on`). */
export { createSqsConsumer } from './sqs-consumer.js';
/** Options of `createSqsConsumer` and of `createSqsHandler`. */
export type { SqsConsumerOptions, SqsHandlerOptions } from './sqs-options.js';
/** The low-level handler for your own receive loop: processes and settles messages you received. */
export { createSqsHandler, type SqsHandler } from './sqs-handler.js';
/** What `SqsHandler.handle` resolves with. */
export type { SqsHandleResult } from './sqs-processing.js';
/** One message's result, and what was done with it on SQS. */
export type { SqsMessageResult, SqsSettlement } from './sqs-settlement.js';
/** The message attribute producers put the message id in (unless `messageId.attribute` says otherwise). */
export { DEFAULT_MESSAGE_ID_ATTRIBUTE } from './sqs-message.js';
/** Attribute names of dead-letters next to core's `x-inboxed-*` ones: SQS extras, and the JSON attribute holding what did not fit in 10. */
export { OVERFLOW_ATTRIBUTE, SqsDeadLetterAttributes } from './sqs-dead-letter.js';
/** Error codes of this adapter (`SQS_*`), next to core's `InboxErrorCodes`. */
export { SqsErrorCodes, type SqsErrorCode } from './sqs-errors.js';
/** The consumer contract and the types that come with it, shared by every inboxed adapter. */
export type {
  ConsumerEvents,
  ConsumerState,
  ConsumerStatus,
  DeliveryTiming,
  InboxConsumer,
  InboxLogger,
  MessageIdOptions,
  RedeliveryHorizon,
  RetentionGuardOptions,
} from '@inboxed/core/adapter';
