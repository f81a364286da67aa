/**
 * Building blocks for broker adapters (`@inboxed/amqp`, `@inboxed/kafka`, `@inboxed/sqs`): the
 * pieces every adapter needs identically, kept here so brokers cannot drift apart.
 */
export { decodePayload, isJsonContentType, UNPARSEABLE_BODY, UNPARSEABLE_BODY_REASON, type DecodedPayload } from './payload.js';
export { actionFor, adapterDeadLetter, deadLetterHeaders, DeadLetterHeaders, type OutcomeAction } from './outcomes.js';
export { InFlight } from './in-flight.js';
export { ConsumerEventEmitter, type ConsumerEvents } from './events.js';
export { checkTablesAtStart } from './start-check.js';
