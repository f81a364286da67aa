/**
 * @inboxed/amqp: RabbitMQ (amqplib) adapter for inboxed. Acks only after the database commit,
 * delays retries in per-delay retry queues, dead-letters poison messages with reason headers, and
 * reconnects with backoff.
 *
 * @packageDocumentation
 */
export { createAmqpConsumer, type AmqpConsumer, type AmqpConsumerOptions, type AmqpConsumerStatus } from './amqp-consumer.js';
export { createAmqpMessageHandler, type AmqpMessageHandler, type AmqpMessageHandlerOptions, type AmqpBatchOptions } from './amqp-message-handler.js';
export { extractMessageId, attemptOf, ATTEMPT_HEADER, ORIGINAL_QUEUE_HEADER, type MessageIdExtractor, type PayloadMode } from './amqp-message.js';
export { assertAmqpTopology, retryQueueName, retryTierFor, DEFAULT_RETRY_DELAYS_MS, type DeadLetterTarget } from './amqp-topology.js';
export { AmqpErrorCodes, toAmqpError, type AmqpErrorCode } from './amqp-errors.js';
