/**
 * @inboxed/amqp: RabbitMQ (amqplib) adapter for inboxed. Acks only after the database commit,
 * delays retries in per-delay retry queues, dead-letters poison messages with reason headers
 * (copies confirmed by the broker before the original is acked), and reconnects with backoff.
 *
 * @packageDocumentation
 */

/** Creates a RabbitMQ consumer; see {@link AmqpConsumerOptions}. */
export { createAmqpConsumer } from './amqp-consumer.js';
/** Options of `createAmqpConsumer`. */
export type { AmqpConsumerOptions, AmqpConnection } from './amqp-options.js';
/** An `onMessage` callback for your own `channel.consume` loop, and its options. */
export { createAmqpMessageHandler, type AmqpMessageHandler, type AmqpMessageHandlerOptions } from './amqp-handler.js';
/** How the message id is found: `extract`, then the header, then `properties.messageId`. */
export type { AmqpMessageIdOptions } from './amqp-message.js';
/** Declares the retry and dead-letter queues a consumer or handler publishes to. */
export { assertAmqpTopology, type AmqpTopologyOptions, type DeadLetterTarget } from './amqp-topology.js';
/** The `AMQP_*` error codes. */
export { AmqpErrorCodes, type AmqpErrorCode } from './amqp-errors.js';
/** The consumer contract shared by every inboxed adapter. */
export type {
  ConsumerEvents,
  ConsumerState,
  ConsumerStatus,
  DeliveryTiming,
  InboxConsumer,
  InboxLogger,
  MessageIdOptions,
  PayloadMode,
  RedeliveryHorizon,
  RetentionGuardOptions,
} from '@inboxed/core/adapter';
