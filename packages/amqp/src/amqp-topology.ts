import { InboxError, InboxErrorCodes } from '@inboxed/core';
import type { Channel, Options } from 'amqplib';

/** Where dead-lettered copies go: a queue (published through the default exchange) or an exchange you own. */
export type DeadLetterTarget = { queue: string } | { exchange: string; routingKey?: string };

/** Default delays of the retry queues, in ms: 1 s, 5 s, 30 s, 2 min, 10 min. */
export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [1_000, 5_000, 30_000, 120_000, 600_000];

/** The queues and exchanges a consumer of `queue` relies on, resolved from options. */
export interface Topology {
  queue: string;
  /** Sorted ascending, deduplicated. */
  retryDelaysMs: readonly number[];
  deadLetter: { exchange: string; routingKey: string; queue?: string };
}

/** `<queue>.retry.<ms>`: the retry queue for one delay tier. */
export function retryQueueName(queue: string, delayMs: number): string {
  return `${queue}.retry.${delayMs}`;
}

/** Resolves and validates the topology options. Throws `INVALID_OPTIONS` at construction. */
export function resolveTopology(queue: string, retryDelaysMs: readonly number[] | undefined, deadLetter: DeadLetterTarget | undefined): Topology {
  if (typeof queue !== 'string' || queue === '') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.queue must be a non-empty queue name');
  const delays = [...new Set(retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS)].sort((a, b) => a - b);
  if (delays.length === 0 || delays.some((d) => !Number.isInteger(d) || d < 1 || d > 2 ** 32 - 1)) {
    throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.retryDelaysMs must be a non-empty list of positive integers (milliseconds)');
  }
  const target = deadLetter ?? { queue: `${queue}.dead-letter` };
  const resolvedDeadLetter =
    'queue' in target ? { exchange: '', routingKey: target.queue, queue: target.queue } : { exchange: target.exchange, routingKey: target.routingKey ?? queue };
  return { queue, retryDelaysMs: delays, deadLetter: resolvedDeadLetter };
}

/**
 * The retry tier for a wanted delay: the smallest configured delay that is at least `retryAfterMs`
 * (never retry earlier than the core asked), or the largest tier when the wish exceeds them all.
 */
export function retryTierFor(retryAfterMs: number | undefined, delays: readonly number[]): number {
  const wanted = retryAfterMs ?? 0;
  return delays.find((d) => d >= wanted) ?? delays[delays.length - 1]!;
}

/** A human-readable name of the dead-letter target, for the `dead_letter` event. */
export function deadLetterDestination(topology: Topology): string {
  const { exchange, routingKey } = topology.deadLetter;
  return exchange === '' ? `amqp:${routingKey}` : `amqp:${exchange}/${routingKey}`;
}

/**
 * Declares what the consumer owns: one durable retry queue per delay (`x-message-ttl` = delay,
 * dead-lettering back to the work queue through the default exchange), and the dead-letter queue.
 * A dead-letter exchange you named is only checked. The work queue is asserted with `queueOptions`
 * when given, else only checked, so its type and arguments stay yours.
 */
export async function assertTopology(channel: Channel, topology: Topology, queueOptions: Options.AssertQueue | undefined): Promise<void> {
  if (queueOptions === undefined) {
    try {
      await channel.checkQueue(topology.queue);
    } catch (error) {
      if ((error as { code?: unknown }).code !== 404) throw error;
      throw new InboxError(
        InboxErrorCodes.INVALID_OPTIONS,
        `the queue ${JSON.stringify(topology.queue)} does not exist: declare it, or pass queueOptions (e.g. { durable: true }) so the consumer declares it`,
        { cause: error, details: { queue: topology.queue } },
      );
    }
  } else {
    await channel.assertQueue(topology.queue, queueOptions);
  }
  for (const delay of topology.retryDelaysMs) {
    await channel.assertQueue(retryQueueName(topology.queue, delay), {
      durable: true,
      arguments: {
        'x-message-ttl': delay,
        'x-dead-letter-exchange': '',
        'x-dead-letter-routing-key': topology.queue,
      },
    });
  }
  const { exchange, queue } = topology.deadLetter;
  if (queue !== undefined) await channel.assertQueue(queue, { durable: true });
  else if (exchange !== '') await channel.checkExchange(exchange);
}

/**
 * For {@link createAmqpMessageHandler} users: declares the retry queues and dead-letter queue a
 * handler with the same options publishes to (see {@link assertTopology}). Defaults as in
 * `createAmqpConsumer`: delays `[1000, 5000, 30000, 120000, 600000]`, dead-letter queue
 * `<queue>.dead-letter`, work queue only checked unless `queueOptions` is given.
 */
export async function assertAmqpTopology(
  channel: Channel,
  options: { queue: string; retryDelaysMs?: readonly number[]; deadLetter?: DeadLetterTarget; queueOptions?: Options.AssertQueue },
): Promise<void> {
  await assertTopology(channel, resolveTopology(options.queue, options.retryDelaysMs, options.deadLetter), options.queueOptions);
}
