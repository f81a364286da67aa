/**
 * @inboxed/kafka: a kafkajs consumer whose handler effects commit exactly once per message id,
 * with offsets committed only after the database, ordered per-partition retries, a dead-letter
 * topic and rebalance safety.
 *
 * @packageDocumentation
 */
export { createKafkaConsumer, type KafkaConsumerOptions, type KafkaInboxConsumer } from './kafka-consumer.js';
export {
  createEachMessageHandler,
  createEachBatchHandler,
  type KafkaHandlerOptions,
  type KafkaHandlerControls,
  type KafkaEachMessageHandler,
  type KafkaEachBatchHandler,
} from './kafka-handlers.js';
export type { KafkaProcessingOptions } from './kafka-runtime.js';
export { KafkaErrorCodes, type KafkaErrorCode } from './kafka-errors.js';
export { KafkaDeadLetterHeaders, deadLetterTopicFor, type DeadLetterTopicOption } from './kafka-dead-letter.js';
export {
  toInboxMessage,
  messageIdOf,
  recordIdentity,
  headerString,
  type MessageIdExtractor,
  type MessageMappingOptions,
  type MappedRecord,
  type RecordPosition,
} from './kafka-message.js';
export type {
  KafkaLike,
  KafkaConsumerLike,
  KafkaProducerLike,
  KafkaConsumerConfigLike,
  KafkaProducerConfigLike,
  KafkaRecord,
  KafkaHeaders,
  KafkaOutgoingRecord,
  EachMessagePayloadLike,
  EachBatchPayloadLike,
  KafkaBatchLike,
  TopicPartitions,
} from './kafka-types.js';
