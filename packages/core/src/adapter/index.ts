/**
 * `@inboxed/core/adapter`: the contract every broker consumer implements and the building blocks
 * they share, so `@inboxed/amqp`, `@inboxed/kafka` and `@inboxed/sqs` (and a fourth broker) fill in
 * only the broker-specific blanks: one lifecycle, one set of events and options, one rule for a
 * processor that breaks its contract, one mapping from outcome to broker action.
 *
 * @packageDocumentation
 */
export {
  DEFAULT_STOP_TIMEOUT_MS,
  type ConsumerOptions,
  type ConsumerState,
  type ConsumerStatus,
  type InboxConsumer,
  type MessageIdOptions,
} from './contract.js';
export { ConsumerLifecycle, type LifecycleHooks } from './lifecycle.js';
export { ConsumerEventEmitter, INFRASTRUCTURE_ERROR_INTERVAL_MS, type ConsumerEvents, type DeliveryTiming } from './events.js';
export { defaultLogger, type InboxLogger } from './logger.js';
export { callProcessor } from './processor-call.js';
export { parseXRayTraceHeader, type MessagingContext } from '../telemetry/messaging.js';
export { decodePayload, isJsonContentType, UNPARSEABLE_BODY, UNPARSEABLE_BODY_REASON, type DecodedPayload, type PayloadMode } from './payload.js';
export { actionFor, adapterDeadLetter, deadLetterHeaders, DeadLetterHeaders, redeliverAfterMs, type OutcomeAction } from './outcomes.js';
export { InFlight } from './in-flight.js';
export { recordDeadLetterOf } from './dead-letter-record.js';
export { checkTablesAtStart } from './start-check.js';
export {
  checkRetentionHorizon,
  formatDuration,
  guardRetentionAtStart,
  validateRetentionOptions,
  type RedeliveryHorizon,
  type RetentionFinding,
  type RetentionGuardOptions,
} from './retention-guard.js';
export { backoffDelay, sleep, type BackoffOptions } from '../backoff.js';
export { checkMessageId, extractedMessageId, MAX_MESSAGE_ID_BYTES, messageIdText } from '../message-id.js';
