import type { Message, MessageAttributeValue } from '@aws-sdk/client-sqs';
import { deadLetterHeaders, DeadLetterHeaders, type InboxOutcome } from '@inboxed/core';

/** SQS accepts at most 10 message attributes per message. */
export const MAX_MESSAGE_ATTRIBUTES = 10;

/**
 * Attributes that did not fit in the 10 allowed go here, as one JSON object:
 * `{ "<name>": { "type": "String" | "Number" | "Binary", "value": "<string, base64 for Binary>" } }`.
 */
export const OVERFLOW_ATTRIBUTE = 'x-inboxed-overflow';

/** Transport extras attached to SQS dead-letters next to core's `x-inboxed-*` headers. */
export const SqsDeadLetterAttributes = {
  /** URL of the queue the message was received from. */
  SOURCE_QUEUE: 'x-inboxed-source-queue',
  /** The SQS `MessageId` of the original message. */
  SQS_MESSAGE_ID: 'x-inboxed-sqs-message-id',
  /** `ApproximateReceiveCount` at dead-lettering. */
  RECEIVE_COUNT: 'x-inboxed-receive-count',
  /** The FIFO `MessageGroupId` of the original message. */
  MESSAGE_GROUP_ID: 'x-inboxed-message-group-id',
} as const;

// The attributes an operator looks at first stay individual; timestamps and extras may overflow.
const PRIORITY = [
  DeadLetterHeaders.REASON,
  DeadLetterHeaders.ERROR_CODE,
  DeadLetterHeaders.MESSAGE_ID,
  DeadLetterHeaders.CONSUMER,
  DeadLetterHeaders.ATTEMPT,
  DeadLetterHeaders.ERROR,
];

/**
 * Characters SQS refuses in a message (body or attribute): outside #x9 | #xA | #xD | #x20-#xD7FF |
 * #xE000-#xFFFD | #x10000-#x10FFFF. A refused dead-letter send keeps the message coming back, so
 * texts from errors and handlers must never carry one.
 */
const SQS_INVALID = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

/** `value` with every character SQS refuses replaced by U+FFFD. */
export function sqsSafeText(value: string): string {
  return value.replace(SQS_INVALID, '\uFFFD');
}

/** True when SQS accepts `value` as it is. */
function isSqsSafe(value: string): boolean {
  SQS_INVALID.lastIndex = 0;
  return !SQS_INVALID.test(value);
}

const text = (value: string): MessageAttributeValue => ({ DataType: 'String', StringValue: sqsSafeText(value) });

/**
 * The message attributes of a dead-letter: the original message id under `messageIdAttribute`
 * (so a message moved back from the DLQ keeps its identity), core's `x-inboxed-*` reason headers,
 * SQS extras, then the original attributes. When that exceeds SQS's 10-attribute limit, the first
 * nine stay individual and the rest are packed into one JSON attribute, {@link OVERFLOW_ATTRIBUTE}.
 */
export function deadLetterAttributes(
  outcome: InboxOutcome,
  message: Message,
  context: { queueUrl: string; messageIdAttribute: string; messageId: string | undefined; now?: Date },
): Record<string, MessageAttributeValue> {
  const ordered = new Map<string, MessageAttributeValue>();
  // An id SQS cannot carry as an attribute (it came from the body) is left out rather than altered:
  // a replay then finds the real id in the body again, where an altered one would be a new message.
  if (context.messageId !== undefined && isSqsSafe(context.messageId)) ordered.set(context.messageIdAttribute, text(context.messageId));
  const headers: Record<string, string> = deadLetterHeaders(outcome, context.now);
  for (const name of PRIORITY) if (headers[name] !== undefined) ordered.set(name, text(headers[name]));
  for (const [name, value] of Object.entries(headers)) if (!ordered.has(name)) ordered.set(name, text(value));
  ordered.set(SqsDeadLetterAttributes.SOURCE_QUEUE, text(context.queueUrl));
  if (message.MessageId !== undefined) ordered.set(SqsDeadLetterAttributes.SQS_MESSAGE_ID, text(message.MessageId));
  if (message.Attributes?.ApproximateReceiveCount !== undefined)
    ordered.set(SqsDeadLetterAttributes.RECEIVE_COUNT, text(message.Attributes.ApproximateReceiveCount));
  if (message.Attributes?.MessageGroupId !== undefined) ordered.set(SqsDeadLetterAttributes.MESSAGE_GROUP_ID, text(message.Attributes.MessageGroupId));
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    if (!ordered.has(name) && name !== OVERFLOW_ATTRIBUTE) ordered.set(name, value);
  }
  return packAttributes([...ordered]);
}

/** Keeps up to 10 attributes; beyond that, the first 9 plus one JSON {@link OVERFLOW_ATTRIBUTE} with the rest. */
export function packAttributes(entries: Array<[string, MessageAttributeValue]>): Record<string, MessageAttributeValue> {
  if (entries.length <= MAX_MESSAGE_ATTRIBUTES) return Object.fromEntries(entries);
  const kept = entries.slice(0, MAX_MESSAGE_ATTRIBUTES - 1);
  const overflow: Record<string, { type: string; value: string }> = {};
  for (const [name, value] of entries.slice(MAX_MESSAGE_ATTRIBUTES - 1)) {
    const binary = value.BinaryValue !== undefined;
    overflow[name] = {
      type: value.DataType ?? 'String',
      value: binary ? Buffer.from(value.BinaryValue!).toString('base64') : (value.StringValue ?? ''),
    };
  }
  return { ...Object.fromEntries(kept), [OVERFLOW_ATTRIBUTE]: text(JSON.stringify(overflow)) };
}

/** True for a FIFO queue URL (its name ends in `.fifo`). */
export function isFifoQueueUrl(queueUrl: string): boolean {
  return queueUrl.replace(/\/+$/, '').endsWith('.fifo');
}
