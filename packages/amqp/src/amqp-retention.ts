import { formatDuration, type RedeliveryHorizon } from '@inboxed/core/adapter';
import type { Options } from 'amqplib';
import type { Topology } from './amqp-topology.js';

/**
 * @internal The redelivery horizon of a consumer's work queue, from what the consumer itself
 * declares: AMQP has no way to read an existing queue's arguments (nor the policies applied to it),
 * so a queue the consumer only checks is `unknown`, and one asserted without `x-message-ttl` is
 * `unbounded` (RabbitMQ keeps a message until it is consumed). With a TTL, the horizon is the TTL
 * plus the longest retry delay: a copy retried just before the TTL ran out waits in the retry queue,
 * then queues again with a fresh TTL.
 */
export function amqpRedeliveryHorizon(topology: Topology, queueOptions: Options.AssertQueue | undefined): RedeliveryHorizon {
  const queue = `RabbitMQ queue ${topology.queue}`;
  if (queueOptions === undefined) {
    return {
      kind: 'unknown',
      ms: null,
      source: queue,
      detail:
        "the consumer only checks the queue (no queueOptions), and AMQP cannot read an existing queue's arguments or policies: pass queueOptions with its x-message-ttl, or redeliveryHorizonMs",
    };
  }
  // amqplib sends `messageTtl` as `x-message-ttl`, over the same key in `arguments`.
  const ttl = queueOptions.messageTtl ?? (queueOptions.arguments as Record<string, unknown> | undefined)?.['x-message-ttl'];
  const ttlMs = typeof ttl === 'number' ? ttl : typeof ttl === 'string' && ttl.trim() !== '' ? Number(ttl) : Number.NaN;
  if (!Number.isFinite(ttlMs) || ttlMs < 0) {
    return {
      kind: 'unbounded',
      ms: null,
      source: queue,
      detail: 'declared without x-message-ttl, RabbitMQ keeps a message until it is consumed; a message-ttl policy is not visible to the consumer',
    };
  }
  const longestRetry = topology.retryDelaysMs[topology.retryDelaysMs.length - 1] ?? 0;
  return {
    kind: 'bounded',
    ms: ttlMs + longestRetry,
    source: `RabbitMQ queue ${topology.queue} x-message-ttl + longest retry delay`,
    detail: `x-message-ttl ${formatDuration(ttlMs)} + the longest retry delay ${formatDuration(longestRetry)}: a copy retried just before its TTL ran out waits in ${topology.queue}.retry.${longestRetry}, then queues again`,
  };
}
