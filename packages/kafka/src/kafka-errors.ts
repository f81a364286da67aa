import { describeError, InboxError, isInboxError } from '@inboxed/core';

/**
 * Error codes raised by `@inboxed/kafka`, next to core's `InboxErrorCodes`. They reach you through
 * the consumer's `error` event (never thrown for a message's sake).
 */
export const KafkaErrorCodes = {
  /** Committing an offset failed (rebalance in progress, coordinator moved, connection lost). The record is replayed later and resolves as `duplicate`. */
  KAFKA_COMMIT_FAILED: 'KAFKA_COMMIT_FAILED',
  /** Producing a dead-letter record failed; the partition is held and the record retried, nothing is committed past it. */
  KAFKA_DEAD_LETTER_FAILED: 'KAFKA_DEAD_LETTER_FAILED',
  /** The kafkajs consumer crashed; `details.restart` says whether kafkajs restarts it. */
  KAFKA_CONSUMER_CRASHED: 'KAFKA_CONSUMER_CRASHED',
  /** Connecting, subscribing or starting the consumer or the dead-letter producer failed. */
  KAFKA_CONNECTION_FAILED: 'KAFKA_CONNECTION_FAILED',
  /** `stop()` gave up waiting for in-flight work after `stopTimeoutMs`; nothing unfinished was committed. */
  KAFKA_STOP_TIMEOUT: 'KAFKA_STOP_TIMEOUT',
} as const;

/** A code from {@link KafkaErrorCodes}. */
export type KafkaErrorCode = (typeof KafkaErrorCodes)[keyof typeof KafkaErrorCodes];

/** The one place broker errors become {@link InboxError}s: keeps kafkajs' error type and retriability in `details`. */
export function kafkaError(
  code: KafkaErrorCode,
  what: string,
  cause: unknown,
  context: { messageIds?: string[]; details?: Record<string, unknown> } = {},
): InboxError {
  if (isInboxError(cause) && cause.code === code) return cause;
  const broker = cause as { name?: string; type?: string; retriable?: boolean } | undefined;
  return new InboxError(code, `${what}: ${describeError(cause)}`, {
    cause,
    messageIds: context.messageIds ?? [],
    details: {
      ...context.details,
      ...(broker?.name !== undefined ? { errorName: broker.name } : {}),
      ...(broker?.type !== undefined ? { errorType: broker.type } : {}),
      ...(broker?.retriable !== undefined ? { retriable: broker.retriable } : {}),
    },
  });
}
