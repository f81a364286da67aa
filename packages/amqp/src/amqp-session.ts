import amqp, { type Channel, type Options } from 'amqplib';
import type { DeliveryHandler } from './amqp-deliveries.js';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';
import type { AmqpConnection } from './amqp-options.js';
import { ConfirmedPublisher, type ReplacePublishChannel } from './amqp-publisher.js';
import { assertTopology, type Topology } from './amqp-topology.js';

/** @internal How to open a session: where to connect, what to declare, how much to prefetch. */
export interface SessionConfig {
  url?: string | Options.Connect | undefined;
  socketOptions?: Record<string, unknown> | undefined;
  /** A connection the caller owns (never closed here), instead of `url`. */
  connection?: AmqpConnection | undefined;
  connectionName: string;
  topology: Topology;
  assertTopology: boolean;
  queueOptions?: Options.AssertQueue | undefined;
  prefetch: number;
}

/** @internal The channels a session's handler works with. */
export interface SessionChannels {
  consumeChannel: Channel;
  publisher: ConfirmedPublisher;
  /** Marks the session lost (a broker-side cancel is handled like a lost channel). */
  markLost: (reason: unknown) => void;
}

/** @internal One connection (or the caller's) with a consuming channel and a confirm channel for copies. */
export interface Session {
  connection: AmqpConnection;
  consumeChannel: Channel;
  /** Publishes copies on the session's confirm channel (replaced when a publish threw). */
  publisher: ConfirmedPublisher;
  consumerTag: string;
  handler: DeliveryHandler;
  /** Resolves with the reason once the connection or one of the channels went away. */
  lost: Promise<unknown>;
  /** False once the session was lost. */
  alive(): boolean;
  /** Stops listening to the connection's events. */
  detach(): void;
  owned: boolean;
}

/** How long one close step may wait for the broker's close-ok (a dead socket never answers). */
const CLOSE_TIMEOUT_MS = 5000;

/** Closing something that is already closed (or whose socket is dead) is nothing to report, and must not hang. */
async function quietly(task: () => Promise<unknown> | unknown): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([task(), new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_TIMEOUT_MS)))]);
  } catch {
    // Already closed.
  } finally {
    clearTimeout(timer);
  }
}

/**
 * @internal Opens a session: connects (unless the caller owns the connection), asserts the topology
 * on a channel of its own (a failed check closes its channel), opens the consuming channel with
 * `prefetch` and a confirm channel for copies, and subscribes with the handler `createHandler`
 * builds for these channels. Rejects, leaving nothing open, when any step fails.
 */
export async function openSession(config: SessionConfig, createHandler: (channels: SessionChannels) => DeliveryHandler): Promise<Session> {
  const owned = config.connection === undefined;
  const connection: AmqpConnection =
    config.connection ?? (await amqp.connect(config.url as string, { ...config.socketOptions, clientProperties: { connection_name: config.connectionName } }));
  let alive = true;
  let markLost!: (reason: unknown) => void;
  const lost = new Promise<unknown>((resolve) => {
    markLost = (reason) => {
      alive = false;
      resolve(reason);
    };
  });
  // amqplib emits 'error' before 'close'; without a listener an 'error' would crash the process.
  const onError = () => {};
  const onClose = (error?: unknown) => markLost(error ?? new Error('connection closed'));
  connection.on('error', onError);
  connection.on('close', onClose);
  const detach = () => {
    connection.off('error', onError);
    connection.off('close', onClose);
  };
  const channels: Channel[] = [];
  /** Stops watching a channel, by channel: a publish channel the publisher gives up must not end the session. */
  const unwatchers = new Map<Channel, () => void>();
  const watch = <C extends Channel>(channel: C, name: string): C => {
    channels.push(channel);
    let failure: unknown;
    const onError = (error: unknown) => (failure = error);
    const onClose = () => markLost(failure ?? new Error(`${name} channel closed`));
    channel.on('error', onError);
    channel.on('close', onClose);
    unwatchers.set(channel, () => {
      channel.off('close', onClose);
      // Keep an 'error' listener: an error without one would crash the process.
      channel.off('error', onError);
      channel.on('error', () => {});
    });
    return channel;
  };
  /** A fresh confirm channel for the publisher in place of one it gave up; failing to open one ends the session. */
  const replacePublishChannel: ReplacePublishChannel = async (broken) => {
    unwatchers.get(broken)?.();
    unwatchers.delete(broken);
    void quietly(() => broken.close());
    try {
      return watch(await connection.createConfirmChannel(), 'publish');
    } catch (error) {
      markLost(error);
      throw error;
    }
  };
  try {
    if (config.assertTopology) {
      const setup = await connection.createChannel();
      setup.on('error', () => {});
      try {
        await assertTopology(setup, config.topology, config.queueOptions);
      } catch (error) {
        throw toAmqpError(AmqpErrorCodes.TOPOLOGY_FAILED, `could not assert the topology of ${config.topology.queue}`, error, {
          details: { queue: config.topology.queue },
        });
      }
      await quietly(() => setup.close());
    }
    const consumeChannel = watch(await connection.createChannel(), 'consume');
    const publisher = new ConfirmedPublisher(watch(await connection.createConfirmChannel(), 'publish'), replacePublishChannel);
    await consumeChannel.prefetch(config.prefetch);
    const handler = createHandler({ consumeChannel, publisher, markLost });
    const { consumerTag } = await consumeChannel.consume(config.topology.queue, handler, { noAck: false });
    return { connection, consumeChannel, publisher, consumerTag, handler, lost, alive: () => alive, detach, owned };
  } catch (error) {
    detach();
    if (owned) await quietly(() => connection.close());
    else for (const channel of channels) await quietly(() => channel.close());
    throw error;
  }
}

/** @internal Cancels the subscription: no new deliveries after cancel-ok; those received are finished by the drain (run, or requeued unstarted once the stop signal fired). */
export async function cancelSession(session: Session): Promise<void> {
  await quietly(() => session.consumeChannel.cancel(session.consumerTag));
}

/**
 * @internal Closes a session's channels, then (when the consumer owns it) its connection. Channels
 * first: their close-ok comes after the broker applied every ack sent on them; closing only the
 * connection could let its close frame overtake acks still queued in amqplib's per-channel buffers,
 * and committed messages would come back as redeliveries. Unacked deliveries return to the queue.
 */
export async function closeSession(session: Session): Promise<void> {
  session.detach();
  await quietly(() => session.consumeChannel.close());
  await quietly(() => session.publisher.close());
  if (session.owned) await quietly(() => session.connection.close());
}
