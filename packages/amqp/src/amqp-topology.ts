import { InboxError, InboxErrorCodes } from '@inboxed/core';
import type { Channel, Options } from 'amqplib';
import { DEFAULT_RETRY_DELAYS_MS, retryQueueName } from './amqp-retry.js';

/** Where dead-lettered copies go: a queue (published through the default exchange) or an exchange you own. */
export type DeadLetterTarget = { queue: string } | { exchange: string; routingKey?: string };

/** @internal The queues and exchanges a consumer of `queue` relies on, resolved from options. */
export interface Topology {
  queue: string;
  /** Sorted ascending, deduplicated. */
  retryDelaysMs: readonly number[];
  deadLetter: { exchange: string; routingKey: string; queue?: string };
}

/** @internal Resolves and validates the topology options. Throws `INVALID_OPTIONS` at construction. */
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
 * @internal Declares what the consumer owns: one durable retry queue per delay (`x-message-ttl` =
 * delay, dead-lettering back to the work queue through the default exchange), and the dead-letter
 * queue. A dead-letter exchange you named is only checked. The work queue is asserted with
 * `queueOptions` when given, else only checked, so its type and arguments stay yours.
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

/** Options of {@link assertAmqpTopology}: the same names and defaults as `createAmqpConsumer`'s. */
export interface AmqpTopologyOptions {
  /** The work queue. @defaultValue none (required) */
  queue: string;
  /** Delays of the retry queues (`<queue>.retry.<ms>`), in ms. @defaultValue `[1000, 5000, 30000, 120000, 600000]` */
  retryDelaysMs?: readonly number[];
  /** Where dead-lettered copies go. @defaultValue `{ queue: '<queue>.dead-letter' }` */
  deadLetter?: DeadLetterTarget;
  /** Assert the work queue with these options (e.g. `{ durable: true }`). @defaultValue only check that it exists */
  queueOptions?: Options.AssertQueue;
}

/**
 * For {@link createAmqpMessageHandler} users (and for declaring the queues ahead of deployment):
 * declares the retry queues and the dead-letter queue that a handler with the same options
 * publishes to, and checks (or, with `queueOptions`, asserts) the work queue. `createAmqpConsumer`
 * does this itself on every (re)connect.
 */
export async function assertAmqpTopology(channel: Channel, options: AmqpTopologyOptions): Promise<void> {
  await assertTopology(channel, resolveTopology(options.queue, options.retryDelaysMs, options.deadLetter), options.queueOptions);
}
