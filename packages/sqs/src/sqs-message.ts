import { createHash } from 'node:crypto';
import type { Message } from '@aws-sdk/client-sqs';
import { describeError, InboxError, InboxErrorCodes, OutcomeReasons, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import {
  adapterDeadLetter,
  checkMessageId,
  decodePayload,
  messageIdText,
  UNPARSEABLE_BODY_REASON,
  type MessageIdOptions,
  type PayloadMode,
} from '@inboxed/core/adapter';

/** The message attribute holding the producer's message id unless `messageId.attribute` says otherwise. */
export const DEFAULT_MESSAGE_ID_ATTRIBUTE = 'message-id';

/** The message attribute read as the content type in `payload: 'content-type'` mode. */
export const CONTENT_TYPE_ATTRIBUTE = 'content-type';

/** How received SQS messages become inbox messages, resolved from the options. */
export interface MessageMapping {
  /** Message attribute with the id. */
  attribute: string;
  extract: ((message: Message) => string | undefined) | undefined;
  /** Fall back to the SQS `MessageId`. */
  fallback: boolean;
  payload: PayloadMode;
  /** `sqs:<queue name>`, stored with the inbox row. */
  source: string;
}

/** Resolves the message-id and payload options (defaults: attribute `message-id`, no fallback, JSON bodies). */
export function messageMapping(
  messageId: MessageIdOptions<Message, 'attribute'> | undefined,
  payload: PayloadMode | undefined,
  queueUrl: string,
): MessageMapping {
  return {
    attribute: messageId?.attribute ?? DEFAULT_MESSAGE_ID_ATTRIBUTE,
    extract: messageId?.extract,
    fallback: messageId?.fallback ?? false,
    payload: payload ?? 'json',
    source: sourceOf(queueUrl),
  };
}

/** `sqs:<queue name>` for a queue URL (`https://sqs.eu-west-1.amazonaws.com/123/orders` -> `sqs:orders`). */
export function sourceOf(queueUrl: string): string {
  const name = queueUrl.replace(/\/+$/, '').split('/').pop();
  return `sqs:${name ?? queueUrl}`;
}

/** A string or binary message attribute as a string (binary decoded as UTF-8). */
function attributeString(message: Message, name: string): string | undefined {
  const attribute = message.MessageAttributes?.[name];
  if (attribute === undefined) return undefined;
  if (attribute.StringValue !== undefined) return attribute.StringValue;
  if (attribute.BinaryValue !== undefined) return Buffer.from(attribute.BinaryValue).toString('utf8');
  return undefined;
}

/**
 * The id attribute's text: a String as it is, a Binary only when it is well-formed UTF-8 (decoding
 * malformed bytes would make two different ids one); throws `INVALID_MESSAGE_ID` otherwise.
 */
function idAttribute(message: Message, name: string): string | undefined {
  const attribute = message.MessageAttributes?.[name];
  if (attribute === undefined) return undefined;
  return attribute.StringValue ?? messageIdText(attribute.BinaryValue, `message attribute ${JSON.stringify(name)}`);
}

/** Why a delivery has no usable id, when the adapter can tell before the processor runs. */
export interface IdProblem {
  reason: string;
  error: InboxError;
}

/**
 * The FIFO `MessageDeduplicationId` when the producer chose it, else undefined. On a queue with
 * `ContentBasedDeduplication` SQS fills it in with the lower-case hex SHA-256 of the UTF-8 body: that
 * names the content, not a send, so a repeatable command sent again after SQS's 5-minute window
 * would be acked as a duplicate of the first. Such an id is not taken (compared case-insensitively;
 * a producer id that happens to equal the body's hash is indistinguishable and not taken either).
 */
export function producerDeduplicationId(message: Message): string | undefined {
  const deduplicationId = message.Attributes?.MessageDeduplicationId;
  if (deduplicationId === undefined) return undefined;
  return deduplicationId.toLowerCase() === sha256Hex(message.Body ?? '') ? undefined : deduplicationId;
}

/** Lower-case hex SHA-256 of `text` as UTF-8: what SQS puts in a content-based deduplication id. */
function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/**
 * The id of the *logical* message, in the contract's order: `extract(message)`, the id attribute,
 * the FIFO `MessageDeduplicationId` when the producer set it (not a content-based one, see
 * {@link producerDeduplicationId}), then, only with `fallback`, the SQS `MessageId`, which is stable
 * across redeliveries of one send but not across producer retries. An extractor that throws or
 * returns something other than a string gives no id (the chain does not go on: its answer was wrong,
 * not absent), with the reason in `problem`.
 */
export function messageIdOf(message: Message, mapping: MessageMapping): { id: string | undefined; problem?: IdProblem } {
  if (mapping.extract !== undefined) {
    let extracted: unknown;
    try {
      extracted = mapping.extract(message);
    } catch (error) {
      const text = `messageId.extract threw: ${describeError(error)}`;
      return {
        id: undefined,
        problem: { reason: OutcomeReasons.MISSING_MESSAGE_ID, error: new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, text, { cause: error }) },
      };
    }
    if (typeof extracted === 'string') return { id: extracted };
    if (extracted !== undefined) {
      const text = `messageId.extract returned ${extracted === null ? 'null' : typeof extracted}, not a string`;
      return { id: undefined, problem: { reason: OutcomeReasons.INVALID_MESSAGE_ID, error: new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, text) } };
    }
  }
  let id: string | undefined;
  try {
    id = idAttribute(message, mapping.attribute) ?? producerDeduplicationId(message);
  } catch (error) {
    return { id: undefined, problem: { reason: OutcomeReasons.INVALID_MESSAGE_ID, error: error as InboxError } };
  }
  if (id !== undefined) return { id };
  return { id: mapping.fallback ? message.MessageId : undefined };
}

/** `ApproximateReceiveCount` as a number (1 = first delivery), when the receive requested it. */
export function receiveCount(message: Message): number | undefined {
  const raw = message.Attributes?.ApproximateReceiveCount;
  const count = raw === undefined ? Number.NaN : Number(raw);
  return Number.isInteger(count) && count >= 1 ? count : undefined;
}

/** The FIFO `MessageGroupId`, when the receive requested system attributes. */
export function messageGroupId(message: Message): string | undefined {
  return message.Attributes?.MessageGroupId;
}

/** Message attributes (strings and binaries) and system attributes (prefixed `sqs:`), for the handler's information. */
export function headersOf(message: Message): Record<string, unknown> {
  const headers: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    headers[name] = value.StringValue ?? (value.BinaryValue !== undefined ? Buffer.from(value.BinaryValue) : undefined);
  }
  for (const [name, value] of Object.entries(message.Attributes ?? {})) headers[`sqs:${name}`] = value;
  if (message.MessageId !== undefined) headers['sqs:MessageId'] = message.MessageId;
  return headers;
}

/** A received message mapped for the processor, or the dead-letter outcome the adapter decided itself. */
export type MappedSqsMessage = { ok: true; id: string; message: InboxMessage } | { ok: false; id: string | undefined; outcome: InboxOutcome };

/**
 * Maps an SQS message to the broker-neutral {@link InboxMessage}: id as in {@link messageIdOf},
 * payload decoded per `mapping.payload` (the `content-type` attribute in `'content-type'` mode),
 * attempt from `ApproximateReceiveCount`. An unparseable body (`unparseable-body`) or a missing id
 * (`missing-message-id`) becomes a `dead-letter` outcome without reaching the processor.
 */
export function toInboxMessage(message: Message, mapping: MessageMapping, consumer: string, receivedAt: Date): MappedSqsMessage {
  const { id, problem } = messageIdOf(message, mapping);
  const attempt = receiveCount(message);
  const decoded = decodePayload(message.Body, mapping.payload, attributeString(message, CONTENT_TYPE_ATTRIBUTE));
  if (!decoded.ok) {
    return { ok: false, id, outcome: adapterDeadLetter({ messageId: id ?? '', consumer, reason: UNPARSEABLE_BODY_REASON, error: decoded.error, attempt }) };
  }
  if (id === undefined) {
    const { reason, error } = problem ?? checkMessageId(undefined)!;
    return { ok: false, id, outcome: adapterDeadLetter({ messageId: '', consumer, reason, error, attempt }) };
  }
  return {
    ok: true,
    id,
    message: {
      id,
      payload: decoded.payload,
      headers: headersOf(message),
      attempt,
      receivedAt,
      source: mapping.source,
      // Received before: the earlier receive may have died with the process. Core then counts the attempt before it runs.
      ...(attempt !== undefined && attempt > 1 ? { redelivered: true } : {}),
    },
  };
}
