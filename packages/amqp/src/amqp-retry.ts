import { OutcomeReasons, type InboxOutcome } from '@inboxed/core';
import { redeliverAfterMs } from '@inboxed/core/adapter';
import type { ConsumeMessage } from 'amqplib';
import { messageIdHeaderOf, publishCopy } from './amqp-header-budget.js';
import { ATTEMPT_HEADER, attemptOf, ORIGINAL_QUEUE_HEADER } from './amqp-message.js';
import { copyProperties, type ConfirmedPublisher } from './amqp-publisher.js';

/** Default delays of the retry queues, in ms: 1 s, 5 s, 30 s, 2 min, 10 min. */
export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [1_000, 5_000, 30_000, 120_000, 600_000];

/** `<queue>.retry.<ms>`: the retry queue of one delay tier. */
export function retryQueueName(queue: string, delayMs: number): string {
  return `${queue}.retry.${delayMs}`;
}

/**
 * The retry tier for a wanted delay: the smallest configured delay that is at least `retryAfterMs`
 * (never retry earlier than the core asked), or the largest tier when the wish exceeds them all.
 */
export function retryTierFor(retryAfterMs: number | undefined, delays: readonly number[]): number {
  const wanted = retryAfterMs ?? 0;
  return delays.find((d) => d >= wanted) ?? delays[delays.length - 1]!;
}

/**
 * The attempt a retried copy carries: only a `retry` for a handler failure (`handler-failed`,
 * including a handler timeout) is an attempt the core counts; a database outage, a lock wait, a
 * serialization conflict, a processor that threw or a lost lease (`lease-lost`) is nobody's fault
 * and must not push the message toward `maxAttempts`, and neither is a `busy` outcome (another worker
 * holds the lease: not now), so the copy keeps the attempt it arrived with.
 */
export function retriedAttempt(delivery: ConsumeMessage, outcome: InboxOutcome): number {
  const previous = attemptOf(delivery) - 1;
  const counted = outcome.status === 'retry' && outcome.reason === OutcomeReasons.HANDLER_FAILED;
  return counted ? (outcome.attempt ?? previous + 1) : previous;
}

/**
 * Publishes the copy of a delivery to redeliver later (a `retry` or a `busy` outcome) to the retry
 * queue whose delay fits its `retryAfterMs` (through the default exchange), and resolves once the
 * broker confirmed and routed it. The queue's TTL dead-letters it back to the work queue after the
 * delay. The copy carries the id in `idHeader` (the header the consumer reads it from), so it comes
 * back under the same id; original headers that would not fit amqplib's encoding buffer, or that it
 * cannot encode, are left out (`x-inboxed-headers-dropped`); a copy that cannot be encoded at all
 * rejects with `AMQP_COPY_UNENCODABLE`.
 */
export async function publishRetryCopy(
  publisher: ConfirmedPublisher,
  topology: { queue: string; retryDelaysMs: readonly number[] },
  delivery: ConsumeMessage,
  outcome: InboxOutcome,
  id: string | undefined,
  idHeader: string,
): Promise<void> {
  const { [ATTEMPT_HEADER]: _previousAttempt, ...original } = delivery.properties.headers ?? {};
  const attempt = retriedAttempt(delivery, outcome);
  const own = {
    ...messageIdHeaderOf(idHeader, id),
    ...(attempt > 0 ? { [ATTEMPT_HEADER]: attempt } : {}),
    [ORIGINAL_QUEUE_HEADER]: topology.queue,
  };
  const delay = retryTierFor(redeliverAfterMs(outcome), topology.retryDelaysMs);
  await publishCopy(publisher, {
    exchange: '',
    routingKey: retryQueueName(topology.queue, delay),
    content: delivery.content,
    properties: copyProperties(delivery, id),
    original,
    own,
    messageIds: [outcome.messageId],
  });
}
