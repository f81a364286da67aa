import { describeError, InboxError, InboxErrorCodes, isInboxError, OutcomeReasons, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import {
  adapterDeadLetter,
  checkMessageId,
  DeadLetterHeaders,
  decodePayload,
  extractedMessageId,
  messageIdText,
  UNPARSEABLE_BODY_REASON,
  type MessageIdOptions,
  type PayloadMode,
} from '@inboxed/core/adapter';
import type { ConsumeMessage, Message } from 'amqplib';

/** Header carrying the attempt that failed, on a retried copy (the next delivery is that + 1). Shared with dead-letter headers. */
export const ATTEMPT_HEADER = DeadLetterHeaders.ATTEMPT;
/** Header naming the queue a retried or dead-lettered copy came from. */
export const ORIGINAL_QUEUE_HEADER = 'x-inboxed-original-queue';
/** The header the message id is read from when `messageId.header` is not given. */
export const DEFAULT_MESSAGE_ID_HEADER = 'message-id';

/** How an AMQP consumer finds a delivery's message id: `extract(delivery)`, then the header, then `properties.messageId`. */
export type AmqpMessageIdOptions = MessageIdOptions<ConsumeMessage, 'header'>;

/** @internal Message-id options after defaults and validation. */
export interface ResolvedMessageId {
  header: string;
  extract?: (delivery: ConsumeMessage) => string | undefined;
}

/** @internal Validates `messageId`: RabbitMQ assigns no id of its own that survives redelivery, so `fallback` cannot be honoured. */
export function resolveMessageId(options: AmqpMessageIdOptions | undefined): ResolvedMessageId {
  if (options?.fallback === true) {
    throw new InboxError(
      InboxErrorCodes.INVALID_OPTIONS,
      'options.messageId.fallback is not supported by @inboxed/amqp: RabbitMQ assigns no per-message id that survives redelivery (a delivery tag changes every time); give producers a message id',
    );
  }
  const header = options?.header ?? DEFAULT_MESSAGE_ID_HEADER;
  if (typeof header !== 'string' || header === '') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.messageId.header must be a non-empty string');
  // Copies carry the id in this header: a name AMQP cannot encode (over 255 bytes) would make every
  // copy fail, and one of inboxed's own would be overwritten by the copy's attempt, queue or publish id.
  if (Buffer.byteLength(header, 'utf8') > 255)
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.messageId.header must be at most 255 bytes (an AMQP field name)');
  if (header.toLowerCase().startsWith('x-inboxed-')) {
    throw new InboxError(
      InboxErrorCodes.INVALID_OPTIONS,
      `options.messageId.header must not be one of inboxed's own x-inboxed-* headers (got ${JSON.stringify(header)})`,
    );
  }
  if (options?.extract !== undefined && typeof options.extract !== 'function') {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.messageId.extract must be a function');
  }
  return { header, ...(options?.extract === undefined ? {} : { extract: options.extract }) };
}

/**
 * @internal The producer's message id, in the contract's order: `extract(delivery)`, then the
 * header, then `properties.messageId`. Never the delivery tag: that changes per delivery. Header
 * values arrive as strings, numbers or byte buffers (AMQP field tables); one that cannot be read
 * exactly (malformed UTF-8, an integer past 2^53, a table) throws `INVALID_MESSAGE_ID`, as does an
 * extractor that throws. The header is read only as an own property: a table-valued `__proto__`
 * header must not answer for a header the message does not have.
 */
export function extractMessageId(delivery: Message, options: ResolvedMessageId): string | undefined {
  const extracted = extractedMessageId(options.extract, delivery as ConsumeMessage);
  if (extracted !== undefined) return extracted;
  const headers = delivery.properties.headers;
  const header = headers !== undefined && Object.hasOwn(headers, options.header) ? headers[options.header] : undefined;
  return messageIdText(header, `header ${JSON.stringify(options.header)}`) ?? messageIdText(delivery.properties.messageId, 'properties.messageId');
}

/** @internal The attempt this delivery is: the failed attempt a retried copy carries plus one, else 1. */
export function attemptOf(delivery: Message): number {
  const carried = Number(delivery.properties.headers?.[ATTEMPT_HEADER]);
  return Number.isInteger(carried) && carried > 0 ? carried + 1 : 1;
}

/** @internal A delivery mapped for the processor, or the outcome the adapter decided without it. */
export type MappedDelivery = { id: string | undefined; message: InboxMessage } | { id: string | undefined; outcome: InboxOutcome };

/** @internal What mapping needs besides the delivery. */
export interface MappingContext {
  queue: string;
  consumer: string;
  payload: PayloadMode;
  messageId: ResolvedMessageId;
}

/**
 * @internal Maps a delivery to the core's envelope, or to the final outcome when it cannot be
 * processed at all: no message id (`missing-message-id`), an extractor that threw or an id that
 * cannot be read exactly (`invalid-message-id`), or a JSON body that does not parse
 * (`unparseable-body`) are dead-lettered by the adapter (retrying cannot help). Other invalid ids
 * are left to the processor to refuse.
 */
export function mapDelivery(delivery: ConsumeMessage, context: MappingContext, receivedAt: Date): MappedDelivery {
  const attempt = attemptOf(delivery);
  let id: string | undefined;
  try {
    id = extractMessageId(delivery, context.messageId);
  } catch (error) {
    const problem = isInboxError(error) ? error : new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, describeError(error), { cause: error });
    return {
      id: undefined,
      outcome: adapterDeadLetter({ messageId: '', consumer: context.consumer, reason: OutcomeReasons.INVALID_MESSAGE_ID, error: problem, attempt }),
    };
  }
  const invalid = checkMessageId(id);
  if (invalid !== undefined && invalid.reason === OutcomeReasons.MISSING_MESSAGE_ID) {
    return { id, outcome: adapterDeadLetter({ messageId: id ?? '', consumer: context.consumer, reason: invalid.reason, error: invalid.error, attempt }) };
  }
  const decoded = decodePayload(delivery.content, context.payload, delivery.properties.contentType as string | undefined);
  if (!decoded.ok) {
    return { id, outcome: adapterDeadLetter({ messageId: id!, consumer: context.consumer, reason: UNPARSEABLE_BODY_REASON, error: decoded.error, attempt }) };
  }
  return {
    id,
    message: {
      id: id!,
      payload: decoded.payload,
      headers: { ...delivery.properties.headers },
      attempt,
      receivedAt,
      source: `amqp:${context.queue}`,
      // RabbitMQ sets it on a delivery it handed out before without an ack (a consumer or channel
      // that died, or a requeue): core then counts the attempt before it runs.
      ...(delivery.fields.redelivered === true ? { redelivered: true } : {}),
    },
  };
}
