import type { Message } from '@aws-sdk/client-sqs';
import { adapterDeadLetter, decodePayload, UNPARSEABLE_BODY_REASON, type InboxMessage, type InboxOutcome } from '@inboxed/core';

/** Default message attribute holding the producer's message id. */
export const DEFAULT_MESSAGE_ID_ATTRIBUTE = 'message-id';

/**
 * Returns the message id of a received SQS message, or `undefined` when it has none (the message is
 * then dead-lettered with reason `missing-message-id`). Receives the raw SDK `Message`, with
 * `MessageAttributes` and `Attributes` (system attributes) as received.
 */
export type MessageIdExtractor = (message: Message) => string | undefined;

/** How SQS messages become inbox messages. */
export interface SqsMessageMapping {
  /** Message attribute with the id. Default `message-id`. */
  messageIdAttribute: string;
  /** Custom extraction; wins over the attribute. */
  extractMessageId?: MessageIdExtractor | undefined;
  /** Fall back to `MessageDeduplicationId` (FIFO) and then the SQS `MessageId`. Default true. */
  sqsIdFallback: boolean;
  /** `sqs:<queue name>`, stored with the inbox row. */
  source: string;
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
 * The id that identifies the *logical* message: the extractor's, else the id attribute, else (for
 * FIFO) the `MessageDeduplicationId`, else the SQS `MessageId`. The SQS `MessageId` is stable across
 * redeliveries of one send but not across producer retries (a retried `SendMessage` gets a new one),
 * which is why producers should set the attribute.
 */
export function sqsMessageId(message: Message, mapping: SqsMessageMapping): string | undefined {
  const custom = mapping.extractMessageId !== undefined ? mapping.extractMessageId(message) : attributeString(message, mapping.messageIdAttribute);
  if (custom !== undefined || !mapping.sqsIdFallback) return custom;
  return message.Attributes?.MessageDeduplicationId ?? message.MessageId;
}

/** `ApproximateReceiveCount` as a number (1 = first delivery), when the receive requested it. */
export function receiveCount(message: Message): number | undefined {
  const raw = message.Attributes?.ApproximateReceiveCount;
  const count = raw === undefined ? NaN : Number(raw);
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
export type MappedSqsMessage = { ok: true; id: string | undefined; message: InboxMessage } | { ok: false; id: string | undefined; outcome: InboxOutcome };

/**
 * Maps an SQS message to the broker-neutral {@link InboxMessage}: id as above, JSON payload,
 * attempt from `ApproximateReceiveCount`. An unparseable body becomes a `dead-letter` outcome
 * (reason `unparseable-body`) without reaching the processor. A missing id is passed on as is:
 * core dead-letters it with reason `missing-message-id` without touching the database.
 */
export function toInboxMessage(message: Message, mapping: SqsMessageMapping, consumer: string, receivedAt: Date): MappedSqsMessage {
  const id = sqsMessageId(message, mapping);
  const attempt = receiveCount(message);
  const decoded = decodePayload(message.Body, 'json');
  if (!decoded.ok) {
    const messageId = id ?? message.MessageId ?? '(no message id)';
    return { ok: false, id, outcome: adapterDeadLetter({ messageId, consumer, reason: UNPARSEABLE_BODY_REASON, error: decoded.error, attempt }) };
  }
  return {
    ok: true,
    id,
    message: { id: id as string, payload: decoded.payload, headers: headersOf(message), attempt, receivedAt, source: mapping.source },
  };
}
