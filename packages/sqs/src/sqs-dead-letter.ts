import { type Message, type MessageAttributeValue, SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { InboxError, InboxOutcome } from '@inboxed/core';
import { DeadLetterHeaders, deadLetterHeaders } from '@inboxed/core/adapter';
import type { SqsEntry } from './sqs-batch-calls.js';
import { callWithTimeout, isCallTimeout, SQS_CALL_TIMEOUT_MS } from './sqs-call.js';
import { isClientFault, isSdkError, SqsErrorCodes, toSqsError } from './sqs-errors.js';
import { isFifoQueueUrl } from './sqs-queue-info.js';

/** SQS accepts at most 10 message attributes per message. */
export const MAX_MESSAGE_ATTRIBUTES = 10;

/**
 * Attributes that did not fit in the 10 allowed go here, as one JSON object:
 * `{ "<name>": { "type": "String" | "Number" | "Binary", "value": "<string, base64 for Binary>" } }`.
 */
export const OVERFLOW_ATTRIBUTE = 'x-inboxed-overflow';

/** Transport extras attached to SQS dead-letters next to core's `x-inboxed-*` reason attributes. */
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

/** A name SQS accepts for a message attribute: `[A-Za-z0-9_.-]`, at most 256, no `..`, no leading/trailing `.`, not `AWS.`/`Amazon.`. */
function isAttributeName(name: string): boolean {
  return /^[A-Za-z0-9_.-]{1,256}$/.test(name) && !name.includes('..') && !/^\.|\.$/.test(name) && !/^(aws|amazon)\./i.test(name);
}

const text = (value: string): MessageAttributeValue => ({ DataType: 'String', StringValue: sqsSafeText(value) });

/** What a dead-letter's attributes are built from. */
export interface DeadLetterContext {
  queueUrl: string;
  /** The attribute the message id travels in (`messageId.attribute`). */
  messageIdAttribute: string;
  /** The id the delivery was processed under, when it had one. */
  messageId: string | undefined;
  now?: Date;
}

/**
 * The message attributes of a dead-letter: the original message id under `messageIdAttribute`
 * (so a message moved back from the DLQ keeps its identity), core's `x-inboxed-*` reason headers,
 * SQS extras, then the original attributes. Empty values are left out (SQS refuses them). Beyond
 * SQS's 10-attribute limit, the first nine stay individual and the rest are packed into one JSON
 * attribute, {@link OVERFLOW_ATTRIBUTE}. With `minimal`, only the id and the reason attributes.
 */
export function deadLetterAttributes(
  outcome: InboxOutcome,
  message: Message,
  context: DeadLetterContext,
  minimal = false,
): Record<string, MessageAttributeValue> {
  const ordered = new Map<string, MessageAttributeValue>();
  const put = (name: string, value: string | undefined) => {
    if (value !== undefined && value !== '' && isAttributeName(name)) ordered.set(name, text(value));
  };
  // An id SQS cannot carry as an attribute (it came from the body) is left out rather than altered:
  // a replay then finds the real id in the body again, where an altered one would be a new message.
  if (context.messageId !== undefined && isSqsSafe(context.messageId)) put(context.messageIdAttribute, context.messageId);
  const headers: Record<string, string> = deadLetterHeaders(outcome, context.now);
  for (const name of PRIORITY) put(name, headers[name]);
  if (minimal) return Object.fromEntries(ordered);
  for (const [name, value] of Object.entries(headers)) if (!ordered.has(name)) put(name, value);
  put(SqsDeadLetterAttributes.SOURCE_QUEUE, context.queueUrl);
  put(SqsDeadLetterAttributes.SQS_MESSAGE_ID, message.MessageId);
  put(SqsDeadLetterAttributes.RECEIVE_COUNT, message.Attributes?.ApproximateReceiveCount);
  put(SqsDeadLetterAttributes.MESSAGE_GROUP_ID, message.Attributes?.MessageGroupId);
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
    overflow[name] = { type: value.DataType ?? 'String', value: binary ? Buffer.from(value.BinaryValue!).toString('base64') : (value.StringValue ?? '') };
  }
  return { ...Object.fromEntries(kept), [OVERFLOW_ATTRIBUTE]: text(JSON.stringify(overflow)) };
}

/**
 * Sends a copy of the message to the dead-letter queue: the same body, the reason attributes and
 * the original id. For a FIFO DLQ the original group is kept and the SQS `MessageId` is the
 * deduplication id, so a dead-letter repeated after a failed delete is not stored twice. When SQS
 * refuses the copy (too large with the attributes, an attribute it rejects), it is sent once more
 * with only the id and reason attributes. Resolves with the error when no copy was stored.
 */
export async function sendToDeadLetter(
  client: SQSClient,
  deadLetterQueueUrl: string,
  entry: SqsEntry,
  outcome: InboxOutcome,
  context: DeadLetterContext,
): Promise<InboxError | undefined> {
  const { message } = entry;
  const fifo = isFifoQueueUrl(deadLetterQueueUrl);
  const send = (minimal: boolean) => {
    const command = new SendMessageCommand({
      QueueUrl: deadLetterQueueUrl,
      MessageBody: message.Body ?? '',
      MessageAttributes: deadLetterAttributes(outcome, message, context, minimal),
      ...(fifo
        ? {
            MessageGroupId: message.Attributes?.MessageGroupId ?? 'inboxed-dead-letters',
            MessageDeduplicationId: message.MessageId ?? message.Attributes?.MessageDeduplicationId,
          }
        : {}),
    });
    return callWithTimeout('SendMessage to the dead-letter queue', SQS_CALL_TIMEOUT_MS, (abortSignal) => client.send(command, { abortSignal }));
  };
  let failure: unknown;
  try {
    await send(false);
    return undefined;
  } catch (error) {
    failure = error;
  }
  // SQS refused this copy (or building it failed): one more try with only the id and reason attributes.
  // Not after a timeout: SQS may have stored the full copy, and the message comes back anyway.
  if (!isCallTimeout(failure) && (isClientFault(failure) || !isSdkError(failure))) {
    try {
      await send(true);
      return undefined;
    } catch (error) {
      failure = error;
    }
  }
  return toSqsError(
    SqsErrorCodes.DEAD_LETTER_FAILED,
    `could not send message ${entry.messageId} to the dead-letter queue; it is kept and comes back after a backoff`,
    failure,
    { messageIds: [entry.messageId], details: { deadLetterQueueUrl, reason: outcome.reason } },
  );
}
