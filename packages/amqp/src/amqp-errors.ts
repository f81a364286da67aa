import { describeError, InboxError, isInboxError } from '@inboxed/core';

/**
 * Error codes raised by `@inboxed/amqp`, next to the core's `InboxErrorCodes` (shared concepts such
 * as `STOP_TIMEOUT`, `PROCESSOR_THREW` or `INBOX_TABLE_MISSING` keep their core code). They reach
 * you through the consumer's `error` event or a rejected `start()`; switch on `error.code`.
 */
export const AmqpErrorCodes = {
  /** The first connection (or its channels, or the topology) could not be opened; `start()` rejects with it. */
  CONNECT_FAILED: 'AMQP_CONNECT_FAILED',
  /** The connection or a channel closed under a running consumer (or a reconnect attempt failed); it reconnects with backoff. */
  CONNECTION_LOST: 'AMQP_CONNECTION_LOST',
  /** Asserting or checking the work queue, retry queues or dead-letter target failed. */
  TOPOLOGY_FAILED: 'AMQP_TOPOLOGY_FAILED',
  /** A retry or dead-letter copy was not confirmed by the broker; the original was requeued, not acked. */
  PUBLISH_FAILED: 'AMQP_PUBLISH_FAILED',
  /** A retry or dead-letter copy was returned as unroutable (its queue or exchange is missing); the original was requeued. */
  UNROUTABLE: 'AMQP_UNROUTABLE',
  /**
   * A retry or dead-letter copy could not be encoded (amqplib threw), even with the original headers
   * left out: a retry is dead-lettered instead; a dead-letter is kept (requeued), reported at most once per 30 s.
   */
  COPY_UNENCODABLE: 'AMQP_COPY_UNENCODABLE',
  /** An ack or nack could not be sent (its channel closed); the broker redelivers the message, which then resolves as `duplicate`. */
  ACK_FAILED: 'AMQP_ACK_FAILED',
  /**
   * Settling a delivery threw where nothing should (a bug in a middleware, a hook or inboxed). A
   * delivery not yet acked or requeued is requeued after `requeueDelayMs` (or, its channel gone,
   * redelivered by the broker); the message says which happened.
   */
  SETTLE_FAILED: 'AMQP_SETTLE_FAILED',
  /** The broker cancelled the consumer (queue deleted, node failover); the consumer re-subscribes. */
  CONSUMER_CANCELLED: 'AMQP_CONSUMER_CANCELLED',
} as const;

/** A code from {@link AmqpErrorCodes}. */
export type AmqpErrorCode = (typeof AmqpErrorCodes)[keyof typeof AmqpErrorCodes];

/**
 * @internal The one place that turns amqplib errors into `InboxError`s: keeps amqplib's `code`,
 * `classId` and `methodId` (e.g. 404 NOT_FOUND, 406 PRECONDITION_FAILED) in `details`, the
 * original error in `cause`. An `InboxError` that already has `code` is returned as is.
 */
export function toAmqpError(
  code: AmqpErrorCode,
  text: string,
  cause?: unknown,
  context: { messageIds?: readonly string[]; details?: Record<string, unknown> } = {},
): InboxError {
  if (isInboxError(cause) && cause.code === code) return cause;
  const broker = typeof cause === 'object' && cause !== null ? (cause as { code?: unknown; classId?: unknown; methodId?: unknown }) : {};
  const details: Record<string, unknown> = { ...context.details };
  if (broker.code !== undefined) details.amqpCode = broker.code;
  if (broker.classId !== undefined) details.amqpClassId = broker.classId;
  if (broker.methodId !== undefined) details.amqpMethodId = broker.methodId;
  return new InboxError(code, cause === undefined ? text : `${text}: ${describeError(cause)}`, {
    cause,
    ...(context.messageIds === undefined ? {} : { messageIds: context.messageIds }),
    details,
  });
}
