import { adapterDeadLetter, decodePayload, UNPARSEABLE_BODY_REASON, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import type { ConsumeMessage, Message } from 'amqplib';

/** Header carrying the attempt number of a retried copy (the attempt that failed). Shared with dead-letter headers. */
export const ATTEMPT_HEADER = 'x-inboxed-attempt';
/** Header naming the queue a dead-lettered or retried copy came from. */
export const ORIGINAL_QUEUE_HEADER = 'x-inboxed-original-queue';

/** Finds the id of a delivery when `properties.messageId` and the usual headers do not have it. */
export type MessageIdExtractor = (message: ConsumeMessage) => string | undefined;

/** How a delivery's body becomes `InboxMessage.payload`. */
export type PayloadMode = 'content-type' | 'json' | 'raw';

function asId(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return undefined;
}

/**
 * The producer's message id: `properties.messageId`, else header `x-message-id`, else header
 * `message-id`, else the user's extractor. Never the delivery tag: that changes per delivery.
 */
export function extractMessageId(message: Message, extractor?: MessageIdExtractor): string | undefined {
  const headers = message.properties.headers ?? {};
  return (
    asId(message.properties.messageId) ??
    asId(headers['x-message-id']) ??
    asId(headers['message-id']) ??
    (extractor === undefined ? undefined : asId(extractor(message as ConsumeMessage)))
  );
}

/**
 * The attempt this delivery is: the failed attempt carried by a retried copy plus one, else 1.
 * It lets attempts count up even when the database count is not available.
 */
export function attemptOf(message: Message): number {
  const carried = Number(message.properties.headers?.[ATTEMPT_HEADER]);
  return Number.isInteger(carried) && carried > 0 ? carried + 1 : 1;
}

/**
 * Maps a delivery to the core's envelope, or to the final outcome when it cannot be processed at
 * all (an unparseable JSON body is dead-lettered: retrying cannot make it parse). A missing id is
 * passed through as `undefined` so the core dead-letters it as `missing-message-id` without
 * touching the database.
 */
export function toInboxMessage(
  message: ConsumeMessage,
  context: { queue: string; consumer: string; payload: PayloadMode; messageId?: MessageIdExtractor },
  id: string | undefined = extractMessageId(message, context.messageId),
): { message: InboxMessage } | { outcome: InboxOutcome } {
  const attempt = attemptOf(message);
  const decoded = decodePayload(message.content, context.payload, message.properties.contentType as string | undefined);
  if (!decoded.ok) {
    return {
      outcome: adapterDeadLetter({
        messageId: id ?? '<missing>',
        consumer: context.consumer,
        reason: UNPARSEABLE_BODY_REASON,
        error: decoded.error,
        attempt,
      }),
    };
  }
  return {
    message: {
      id: id as string,
      payload: decoded.payload,
      headers: { ...message.properties.headers },
      attempt,
      receivedAt: new Date(),
      source: `amqp:${context.queue}`,
    },
  };
}
