/**
 * @inboxed/sqs: Amazon SQS adapter for inboxed. Polls a queue with `@aws-sdk/client-sqs`, runs each
 * message through an inbox processor, deletes only after the outcome is final, turns retries into
 * visibility-timeout backoff, keeps slow handlers invisible with heartbeats, keeps FIFO groups in
 * order and dead-letters with reason attributes.
 *
 * @packageDocumentation
 */
export { createSqsConsumer, type SqsConsumer, type SqsConsumerOptions, type SqsConsumerStatus } from './sqs-consumer.js';
export {
  processSqsMessages,
  type ProcessSqsMessagesOptions,
  type SqsMessageResult,
  type SqsProcessResult,
  type SqsSettlement,
} from './process-sqs-messages.js';
export {
  DEFAULT_MESSAGE_ID_ATTRIBUTE,
  sqsMessageId,
  receiveCount,
  toInboxMessage,
  type MessageIdExtractor,
  type SqsMessageMapping,
  type MappedSqsMessage,
} from './sqs-message.js';
export { deadLetterAttributes, packAttributes, MAX_MESSAGE_ATTRIBUTES, OVERFLOW_ATTRIBUTE, SqsDeadLetterAttributes } from './sqs-dead-letter.js';
export { SqsErrorCodes, toSqsError, type SqsErrorCode, type SqsBatchFailure } from './sqs-errors.js';
export { MAX_VISIBILITY_TIMEOUT_SECONDS, capVisibility, retryVisibilitySeconds } from './sqs-visibility.js';
