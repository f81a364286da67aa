import { execFile } from 'node:child_process';
import amqp, { type ChannelModel, type ConfirmChannel, type GetMessage, type Options } from 'amqplib';
import { requireService } from '@inboxed/test-support';
import '@inboxed/test-support/amqp-setup';

/** The RabbitMQ URL the global setup resolved. */
export function amqpUrl(): string {
  return requireService('amqpUrl');
}

function rabbitmqctl(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => execFile('rabbitmqctl', args, { timeout: 30_000 }, (error, stdout) => (error ? reject(error) : resolve(stdout))));
}

/**
 * A test's own publishing connection plus helpers to look at queues. Every queue it declares
 * (and the topology a consumer creates for it) is deleted by `close()`.
 */
export interface TestBroker {
  channel: ConfirmChannel;
  /** Declares a durable work queue (and remembers it, with its retry and dead-letter queues, for cleanup). */
  declareQueue(name: string, options?: Options.AssertQueue): Promise<string>;
  /** Publishes a JSON body (or a raw Buffer) with confirms. */
  publish(queue: string, body: unknown, options?: Options.Publish): Promise<void>;
  /** Ready messages in `queue` (unacked ones are not counted: stop consumers first). */
  depth(queue: string): Promise<number>;
  /** Takes every ready message off `queue` (acking them). */
  drain(queue: string): Promise<GetMessage[]>;
  /** Closes the RabbitMQ connections whose client-provided name is `name`, from the server side. */
  closeConnectionsNamed(name: string): Promise<number>;
  close(): Promise<void>;
}

export async function createTestBroker(): Promise<TestBroker> {
  const connection: ChannelModel = await amqp.connect(amqpUrl());
  connection.on('error', () => {});
  const channel = await connection.createConfirmChannel();
  const owned = new Set<string>();
  return {
    channel,
    async declareQueue(name, options = { durable: true }) {
      owned.add(name);
      await channel.assertQueue(name, options);
      return name;
    },
    async publish(queue, body, options = {}) {
      const content = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
      const contentType = Buffer.isBuffer(body) ? options.contentType : (options.contentType ?? 'application/json');
      channel.sendToQueue(queue, content, { persistent: true, ...options, contentType });
      await channel.waitForConfirms();
    },
    async depth(queue) {
      return (await channel.checkQueue(queue)).messageCount;
    },
    async drain(queue) {
      const messages: GetMessage[] = [];
      for (;;) {
        const message = await channel.get(queue, { noAck: true });
        if (message === false) return messages;
        messages.push(message);
      }
    },
    async closeConnectionsNamed(name) {
      const out = await rabbitmqctl(['list_connections', '-q', '-s', 'pid', 'client_properties']);
      const pids = out
        .split('\n')
        .filter((line) => line.includes(`{"connection_name","${name}"}`))
        .map((line) => line.split('\t')[0]!.trim());
      for (const pid of pids) await rabbitmqctl(['close_connection', pid, 'test: server closes the connection']);
      return pids.length;
    },
    async close() {
      const names = await rabbitmqctl(['list_queues', '-q', '-s', 'name']).catch(() => '');
      for (const queue of names.split('\n').map((n) => n.trim())) {
        if ([...owned].some((base) => queue === base || queue.startsWith(`${base}.`))) await channel.deleteQueue(queue).catch(() => undefined);
      }
      await connection.close().catch(() => undefined);
    },
  };
}
