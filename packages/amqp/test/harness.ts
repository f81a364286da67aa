// The RabbitMQ side of the conformance suite and the soak (test/conformance): one harness per test,
// with its own work queue, retry queues and dead-letter queue, against the real broker. The shared
// worker process imports this module too (createWorkerConsumer), so it imports nothing of vitest
// at load time.
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import type { AnyInboxProcessor, InboxOutcome } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';
import type {} from '@inboxed/test-support/amqp-setup';
import { uniqueName } from '@inboxed/test-support/unique-name';
import { requiredEnv } from '@inboxed/test-support/worker-env';
import amqp, { type ChannelModel, type ConfirmChannel, type GetMessage, type Options } from 'amqplib';
import type { BrokerHarness, ConsumerSettings, DeadLetter, HarnessModule, PublishedMessage } from '../../../test/conformance/harness.js';
import { type AmqpConsumerOptions, assertAmqpTopology, createAmqpConsumer } from '../src/index.js';

/** Retry tiers of harness consumers: every retry comes back within a second. */
export const HARNESS_RETRY_DELAYS_MS: readonly number[] = [100, 500, 1000];
/** Fast reconnects for tests (the default starts at 200 ms and grows to 30 s). */
const FAST_RECONNECT = { baseDelayMs: 100, maxDelayMs: 1000 };

function rabbitmqctl(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => execFile('rabbitmqctl', args, { timeout: 30_000 }, (error, stdout) => (error ? reject(error) : resolve(stdout))));
}

/** The broker harness, plus what the package's own RabbitMQ-specific tests need. */
export interface AmqpHarness extends BrokerHarness {
  /** The broker URL (known after `setup()`). */
  readonly url: string;
  /** The work queue. */
  readonly queue: string;
  /** `<queue>.retry.<ms>` for each of {@link HARNESS_RETRY_DELAYS_MS}. */
  readonly retryQueues: readonly string[];
  /** `<queue>.dead-letter`. */
  readonly deadLetterQueue: string;
  /** The harness's own confirm channel (publishing, checking queues). */
  readonly channel: ConfirmChannel;
  /** A consumer of the work queue with the harness's fast settings, overridden by `options`; not started. */
  consumer(handler: AnyInboxProcessor, options?: Partial<AmqpConsumerOptions>): InboxConsumer;
  /** Publishes one raw message (a Buffer as is, anything else as JSON) with these properties, confirmed. */
  publishRaw(body: unknown, properties?: Options.Publish, queue?: string): Promise<void>;
  /** Ready messages in a queue (the work queue by default); unacked ones are not counted. */
  depth(queue?: string): Promise<number>;
  /** Takes every ready message off a queue (acking them). */
  drain(queue: string): Promise<GetMessage[]>;
  /** The broker's ids of the open connections whose client-provided name is `name`. */
  connectionsNamed(name: string): Promise<string[]>;
  /** Closes, from the server side, the connections whose client-provided name is `name`. Returns how many. */
  closeConnectionsNamed(name: string): Promise<number>;
}

/** Reads a header as text (AMQP field tables may carry strings, numbers or buffers). */
function text(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
}

export function createHarness(): AmqpHarness {
  const queue = uniqueName('amqp_conf');
  const retryQueues = HARNESS_RETRY_DELAYS_MS.map((ms) => `${queue}.retry.${ms}`);
  const deadLetterQueue = `${queue}.dead-letter`;
  const counted = new Set([queue, ...retryQueues]);
  let url: string | undefined;
  let connection: ChannelModel | undefined;
  let channel: ConfirmChannel | undefined;
  const ready = () => {
    if (channel === undefined || url === undefined) throw new Error('amqp harness: call setup() first');
    return { url, channel, connection: connection! };
  };
  const consumer = (handler: AnyInboxProcessor, options: Partial<AmqpConsumerOptions> = {}) =>
    createAmqpConsumer({
      url: ready().url,
      queue,
      handler,
      retryDelaysMs: HARNESS_RETRY_DELAYS_MS,
      reconnect: FAST_RECONNECT,
      stopTimeoutMs: 5000,
      ...options,
    });

  /** The broker's process ids of the connections whose client-provided name is `name`. */
  const connectionsNamed = async (name: string) =>
    (await rabbitmqctl(['list_connections', '-q', '-s', 'pid', 'client_properties']))
      .split('\n')
      .filter((line) => line.includes(`{"connection_name","${name}"}`))
      .map((line) => line.split('\t')[0]!.trim());

  /** Ready + unacked on the work queue and the retry queues, from the broker's queue processes (rabbitmqctl: ~0.5 s). */
  const countListed = async () => {
    let total = 0;
    for (const line of (await rabbitmqctl(['list_queues', '-q', '-s', 'name', 'messages_ready', 'messages_unacknowledged'])).split('\n')) {
      const [name, readyCount, unacked] = line.trim().split('\t');
      if (name !== undefined && counted.has(name)) total += Number(readyCount) + Number(unacked);
    }
    return total;
  };
  /** Ready messages on the work queue and the retry queues, over AMQP (on a channel of its own: a missing queue closes it). */
  const countReady = async () => {
    const probe = await ready().connection.createChannel();
    probe.on('error', () => {});
    try {
      let total = 0;
      for (const name of counted) total += (await probe.checkQueue(name)).messageCount;
      return total;
    } finally {
      await probe.close().catch(() => undefined);
    }
  };

  return {
    broker: 'amqp',
    queue,
    retryQueues,
    deadLetterQueue,
    get url() {
      return ready().url;
    },
    get channel() {
      return ready().channel;
    },
    async setup() {
      const { requireService } = await import('@inboxed/test-support/services');
      url = requireService('amqpUrl');
      connection = await amqp.connect(url);
      connection.on('error', () => {});
      channel = await connection.createConfirmChannel();
      // The topology a consumer declares (and checks on every start): work, retry and dead-letter queues.
      await assertAmqpTopology(channel, { queue, retryDelaysMs: HARNESS_RETRY_DELAYS_MS, queueOptions: { durable: true } });
    },
    async teardown() {
      if (connection === undefined) return;
      const cleanup = await connection.createChannel();
      cleanup.on('error', () => {});
      for (const name of [queue, ...retryQueues, deadLetterQueue]) await cleanup.deleteQueue(name).catch(() => undefined);
      await connection.close().catch(() => undefined);
      connection = undefined;
      channel = undefined;
    },
    async publish(messages: PublishedMessage[]) {
      const { channel } = ready();
      for (const message of messages) {
        const content = Buffer.from(message.body ?? JSON.stringify(message.payload ?? null));
        const properties: Options.Publish = { contentType: 'application/json', ...(message.id === undefined ? {} : { messageId: message.id }) };
        // Many publishes in flight, one wait for all confirms; respect the channel's backpressure.
        if (!channel.sendToQueue(queue, content, properties)) await once(channel, 'drain');
      }
      await channel.waitForConfirms();
    },
    consumer,
    createConsumer: (handler: AnyInboxProcessor, settings: ConsumerSettings = {}) =>
      consumer(handler, settings.stopTimeoutMs === undefined ? {} : { stopTimeoutMs: settings.stopTimeoutMs }),
    async pending() {
      // Ready counts come cheaply over AMQP; while anything is ready, work is left (deliveries in flight
      // are then not counted). At zero ready, the unacked ones (which AMQP cannot report) are asked of
      // the broker's queue processes, and ready is read once more: a retried copy moving from its retry
      // queue to the work queue between two reads is missed by one read, never by all three.
      const ready = await countReady();
      if (ready > 0) return ready;
      const listed = await countListed();
      return Math.max(listed, await countReady());
    },
    async deadLetters() {
      // Read without consuming: get everything unacked on a channel of its own, then close it
      // (which returns every message to the queue, in order).
      const reader = await ready().connection.createChannel();
      reader.on('error', () => {});
      const found: DeadLetter[] = [];
      try {
        for (;;) {
          const message = await reader.get(deadLetterQueue, { noAck: false });
          if (message === false) break;
          const headers = message.properties.headers ?? {};
          found.push({
            id: text(headers['x-inboxed-message-id']),
            reason: text(headers['x-inboxed-reason']),
            errorCode: text(headers['x-inboxed-error-code']),
            body: message.content.toString('utf8'),
          });
        }
      } finally {
        await reader.close().catch(() => undefined);
      }
      return found;
    },
    workerEnv: () => ({ AMQP_URL: ready().url, AMQP_QUEUE: queue, AMQP_RETRY_DELAYS_MS: HARNESS_RETRY_DELAYS_MS.join(',') }),
    async publishRaw(body, properties = {}, target = queue) {
      const { channel } = ready();
      const content = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
      const contentType = Buffer.isBuffer(body) ? properties.contentType : (properties.contentType ?? 'application/json');
      channel.sendToQueue(target, content, { persistent: true, ...properties, ...(contentType === undefined ? {} : { contentType }) });
      await channel.waitForConfirms();
    },
    async depth(target = queue) {
      return (await ready().channel.checkQueue(target)).messageCount;
    },
    async drain(target) {
      const messages: GetMessage[] = [];
      for (;;) {
        const message = await ready().channel.get(target, { noAck: true });
        if (message === false) return messages;
        messages.push(message);
      }
    },
    connectionsNamed,
    async closeConnectionsNamed(name) {
      const pids = await connectionsNamed(name);
      for (const pid of pids) await rabbitmqctl(['close_connection', pid, 'test: server closes the connection']);
      return pids.length;
    },
  };
}

/** The consumer the shared worker process (test/conformance/worker.ts) runs, from `workerEnv()`. */
export function createWorkerConsumer(
  env: NodeJS.ProcessEnv,
  handler: AnyInboxProcessor,
  beforeSettle: (outcome: InboxOutcome) => void | Promise<void>,
): InboxConsumer {
  const required = (name: string) => requiredEnv(env, name, 'amqp worker');
  return createAmqpConsumer({
    url: required('AMQP_URL'),
    queue: required('AMQP_QUEUE'),
    retryDelaysMs: required('AMQP_RETRY_DELAYS_MS').split(',').map(Number),
    handler,
    beforeSettle,
    reconnect: FAST_RECONNECT,
    stopTimeoutMs: 10_000,
  });
}

export default { createHarness, createWorkerConsumer } satisfies HarnessModule;
