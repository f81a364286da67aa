import { describeError, InboxError, isInboxError } from '@inboxed/core';

/**
 * Error codes raised by `@inboxed/kafka`, next to core's `InboxErrorCodes` (`STOP_TIMEOUT`,
 * `PROCESSOR_THREW`, `INBOX_TABLE_MISSING`, ...). They reach you through the consumer's `error`
 * event, except `KAFKA_CONNECT_FAILED`, which `start()` also rejects with.
 */
export const KafkaErrorCodes = {
  /**
   * Committing an offset failed; the records are replayed later and resolve as `duplicate`. When
   * the group refused it (rebalance, new generation, unknown member, coordinator moved:
   * `details.refused` is true) the partition's fetched records are dropped at once and the member
   * rejoins; otherwise the partition is held and retried.
   */
  KAFKA_COMMIT_FAILED: 'KAFKA_COMMIT_FAILED',
  /** Producing a dead-letter record failed; the partition is held and the record retried, nothing is committed past it. */
  KAFKA_DEAD_LETTER_FAILED: 'KAFKA_DEAD_LETTER_FAILED',
  /**
   * Processing or settling records threw where nothing should (a bug in a middleware, a hook or
   * inboxed): the partition is held at the first record concerned and retried after `retryBackoff`,
   * nothing is committed past it (what was already done comes back as a `duplicate`).
   */
  KAFKA_SETTLE_FAILED: 'KAFKA_SETTLE_FAILED',
  /** The kafkajs consumer crashed; `details.restart` says whether kafkajs restarts it (otherwise `restartOnCrash` does). */
  KAFKA_CONSUMER_CRASHED: 'KAFKA_CONSUMER_CRASHED',
  /** Connecting, subscribing or starting the consumer or the dead-letter producer failed. */
  KAFKA_CONNECT_FAILED: 'KAFKA_CONNECT_FAILED',
  /** Disconnecting the consumer or the dead-letter producer failed. */
  KAFKA_DISCONNECT_FAILED: 'KAFKA_DISCONNECT_FAILED',
} as const;

/** A code from {@link KafkaErrorCodes}. */
export type KafkaErrorCode = (typeof KafkaErrorCodes)[keyof typeof KafkaErrorCodes];

/**
 * Broker error types (kafkajs `error.type`) by which the group refuses a member's work: the group
 * is rebalancing, or this member's generation or id is no longer current, or the coordinator
 * moved. Offsets this member commits are refused until it rejoins, so it must stop at once.
 */
const REFUSALS = new Set(['REBALANCE_IN_PROGRESS', 'ILLEGAL_GENERATION', 'UNKNOWN_MEMBER_ID', 'NOT_COORDINATOR_FOR_GROUP', 'FENCED_INSTANCE_ID']);

/** The broker error kafkajs wrapped (it wraps protocol errors in retry errors): the innermost cause with a `type`. */
function brokerError(error: unknown): { type: string; retriable?: boolean; name?: string } | undefined {
  let found: { type: string } | undefined;
  for (let e = error as { type?: unknown; cause?: unknown } | undefined, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
    if (typeof e.type === 'string') found = e as { type: string };
    e = e.cause as typeof e;
  }
  return found;
}

/**
 * The broker's refusal inside `error` when the group refused this member's commit or heartbeat
 * because of a rebalance (see {@link REFUSALS}), or `undefined` for any other failure.
 */
export function groupRefusal(error: unknown): Error | undefined {
  const broker = brokerError(error);
  return broker !== undefined && REFUSALS.has(broker.type) ? (broker as unknown as Error) : undefined;
}

/** The one place broker errors become {@link InboxError}s: keeps kafkajs' error name, broker error type and retriability in `details`. */
export function kafkaError(
  code: KafkaErrorCode,
  what: string,
  cause: unknown,
  context: { messageIds?: string[]; details?: Record<string, unknown> } = {},
): InboxError {
  if (isInboxError(cause) && cause.code === code) return cause;
  const outer = cause as { name?: string; retriable?: boolean } | undefined;
  const broker = brokerError(cause);
  return new InboxError(code, `${what}: ${describeError(cause)}`, {
    cause,
    messageIds: context.messageIds ?? [],
    details: {
      ...context.details,
      ...(outer?.name !== undefined ? { errorName: outer.name } : {}),
      ...(broker !== undefined ? { errorType: broker.type } : {}),
      ...(outer?.retriable !== undefined ? { retriable: outer.retriable } : {}),
    },
  });
}
