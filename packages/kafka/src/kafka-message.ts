import { describeError, InboxError, InboxErrorCodes, isInboxError, OutcomeReasons, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import {
  adapterDeadLetter,
  checkMessageId,
  decodePayload,
  extractedMessageId,
  messageIdText,
  UNPARSEABLE_BODY_REASON,
  type MessageIdOptions,
  type PayloadMode,
} from '@inboxed/core/adapter';
import type { KafkaHeaders, KafkaRecord } from './kafka-types.js';

/** One delivered record with where it came from: what `messageId.extract` is given. */
export interface KafkaDelivery {
  topic: string;
  partition: number;
  /** The record, as kafkajs hands it to `eachMessage`. */
  message: KafkaRecord;
}

/** The header carrying the producer's message id unless `messageId.header` names another. */
export const DEFAULT_MESSAGE_ID_HEADER = 'message-id';

/** How records become inbox messages (the resolved `messageId` and `payload` options). */
export interface MessageMapping {
  messageId: MessageIdOptions<KafkaDelivery, 'header'>;
  payload: PayloadMode;
}

/** A record mapped to an inbox message, or the outcome the adapter decided for it without the processor. */
export type MappedDelivery = { ok: true; message: InboxMessage } | { ok: false; outcome: InboxOutcome };

/**
 * The first value of a header as kafkajs hands it: a Buffer or a string, or an array of them for a
 * repeated header. Only strings and Buffers count: kafkajs decodes a header named `__proto__` as
 * `[Object.prototype, value]` (its decoder reads `obj[key]` to detect repeats, which for that name
 * is the prototype), and the prototype is not a value anyone sent.
 */
export function firstHeaderValue(value: KafkaHeaders[string] | undefined): Buffer | string | undefined {
  if (!Array.isArray(value)) return isHeaderValue(value) ? value : undefined;
  return value.find(isHeaderValue);
}

function isHeaderValue(value: unknown): value is Buffer | string {
  return typeof value === 'string' || Buffer.isBuffer(value);
}

/** A header value as a string (kafkajs hands Buffers; repeated headers arrive as arrays: the first wins). */
export function headerString(value: KafkaHeaders[string] | undefined): string | undefined {
  const first = firstHeaderValue(value);
  if (first === undefined) return undefined;
  return typeof first === 'string' ? first : first.toString('utf8');
}

/**
 * `target[name] = value` as an own property whatever the name: assigning `__proto__` would set the
 * object's prototype instead (or do nothing, for a string), and the header would vanish.
 */
export function setHeader<T>(target: Record<string, T>, name: string, value: T): void {
  if (name === '__proto__') Object.defineProperty(target, name, { value, enumerable: true, writable: true, configurable: true });
  else target[name] = value;
}

/** The record's identity `topic/partition/offset`: the message id with `messageId.fallback`. */
export function recordIdentity(delivery: KafkaDelivery): string {
  return `${delivery.topic}/${delivery.partition}/${delivery.message.offset}`;
}

/** The place a record was read from, `kafka:<topic>/<partition>`: the `source` of its message. */
export function sourceOf(topic: string, partition: number): string {
  return `kafka:${topic}/${partition}`;
}

function decodeHeaders(headers: KafkaHeaders | undefined): Record<string, string> {
  const decoded: Record<string, string> = {};
  if (headers == null) return decoded;
  // Object.keys rather than Object.entries: no [name, value] pair allocated per header of every record.
  for (const name of Object.keys(headers)) {
    const text = headerString(headers[name]);
    if (text !== undefined) setHeader(decoded, name, text);
  }
  return decoded;
}

/**
 * The record's message id, tried in this order: `extract(delivery)`, the header (`message-id`
 * unless `header` names another), then, only with `fallback: true`, the record's identity
 * `topic/partition/offset`. Kafka records have no id field of their own. `undefined` when none.
 * Throws `INVALID_MESSAGE_ID` for an extractor that throws or an id that cannot be read exactly
 * (header bytes that are not well-formed UTF-8: decoding would make two different ids one).
 */
export function messageIdOf(delivery: KafkaDelivery, options: MessageIdOptions<KafkaDelivery, 'header'>): string | undefined {
  const extracted = extractedMessageId(options.extract, delivery);
  if (extracted !== undefined) return extracted;
  const name = options.header ?? DEFAULT_MESSAGE_ID_HEADER;
  const headers = delivery.message.headers;
  const header = headers != null && Object.hasOwn(headers, name) ? firstHeaderValue(headers[name]) : undefined;
  const id = messageIdText(header, `header ${JSON.stringify(name)}`);
  if (id !== undefined) return id;
  return options.fallback === true ? recordIdentity(delivery) : undefined;
}

/**
 * Maps a record to the broker-neutral {@link InboxMessage}. A record without a message id, with
 * one that cannot be read exactly, or whose value does not decode, gets its `dead-letter` outcome
 * here (`missing-message-id`, `invalid-message-id`, `unparseable-body`): the processor never sees it. Any id found is passed on as is: core
 * validates it (an empty or oversized id is dead-lettered as `invalid-message-id`). A null value
 * (a tombstone) decodes to `null` in JSON mode rather than failing to parse. `redelivered` marks
 * the message as one that may have been in flight in a process that died (see kafka-batch.ts).
 */
export function toInboxMessage(
  delivery: KafkaDelivery,
  mapping: MessageMapping,
  consumer: string,
  receivedAt: Date = new Date(),
  source: string = sourceOf(delivery.topic, delivery.partition),
  redelivered = false,
): MappedDelivery {
  const { message: record } = delivery;
  let id: string | undefined;
  try {
    id = messageIdOf(delivery, mapping.messageId);
  } catch (error) {
    const problem = isInboxError(error) ? error : new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, describeError(error), { cause: error });
    return { ok: false, outcome: adapterDeadLetter({ messageId: '', consumer, reason: OutcomeReasons.INVALID_MESSAGE_ID, error: problem }) };
  }
  if (id === undefined) {
    const { error } = checkMessageId(undefined)!;
    return { ok: false, outcome: adapterDeadLetter({ messageId: '', consumer, reason: OutcomeReasons.MISSING_MESSAGE_ID, error }) };
  }
  const headers = decodeHeaders(record.headers);
  const decoded =
    record.value === null && mapping.payload === 'json'
      ? { ok: true as const, payload: null }
      : decodePayload(record.value, mapping.payload, headers['content-type']);
  if (!decoded.ok) {
    return { ok: false, outcome: adapterDeadLetter({ messageId: id, consumer, reason: UNPARSEABLE_BODY_REASON, error: decoded.error }) };
  }
  return {
    ok: true,
    message: redelivered
      ? { id, payload: decoded.payload, headers, receivedAt, source, redelivered }
      : { id, payload: decoded.payload, headers, receivedAt, source },
  };
}
