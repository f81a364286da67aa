/**
 * @inboxed/kafka: a kafkajs consumer whose handler effects commit exactly once per message id,
 * with offsets committed only after the database, ordered per-partition retries, a dead-letter
 * topic and rebalance safety.
 *
 * @packageDocumentation
 */

/** The consumer: `createKafkaConsumer(options)` returns an `InboxConsumer` (`start`, `stop`, `status`, `on`). */
export { createKafkaConsumer } from './kafka-consumer.js';
/** Options of `createKafkaConsumer` and of the low-level handlers. */
export type { KafkaConsumerOptions, KafkaProcessingOptions } from './kafka-options.js';
/** Low-level handlers for your own `consumer.run(...)`, with their options and controls. */
export {
  createEachBatchHandler,
  createEachMessageHandler,
  type KafkaHandlerOptions,
  type KafkaHandlerControls,
  type KafkaEachBatchHandler,
  type KafkaEachMessageHandler,
} from './kafka-handler.js';
/** What `messageId.extract` is given: the record with its topic and partition. */
export type { KafkaDelivery } from './kafka-message.js';
/** Error codes of this package (core's codes such as `STOP_TIMEOUT` come with `@inboxed/core`). */
export { KafkaErrorCodes, type KafkaErrorCode } from './kafka-errors.js';
/** The Kafka-specific dead-letter headers, and the `deadLetterTopic` option's type. */
export { KafkaDeadLetterHeaders, type DeadLetterTopicOption } from './kafka-dead-letter.js';
/** The structural kafkajs types the adapter accepts (kafkajs itself, or a KafkaJS-compatible client). */
export type {
  KafkaLike,
  KafkaConsumerLike,
  KafkaProducerLike,
  KafkaAdminLike,
  KafkaTopicConfigsLike,
  KafkaConsumerConfigLike,
  KafkaProducerConfigLike,
  KafkaConsumerEventNames,
  KafkaRecord,
  KafkaHeaders,
  KafkaOutgoingRecord,
  EachMessagePayloadLike,
  EachBatchPayloadLike,
  KafkaBatchLike,
  TopicPartitions,
} from './kafka-types.js';
/** The shared consumer contract, re-exported for convenience. */
export type {
  InboxConsumer,
  ConsumerStatus,
  ConsumerState,
  ConsumerEvents,
  DeliveryTiming,
  InboxLogger,
  MessageIdOptions,
  PayloadMode,
  RedeliveryHorizon,
  RetentionGuardOptions,
} from '@inboxed/core/adapter';
