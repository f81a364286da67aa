import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import net from 'node:net';
import type { TestProject } from 'vitest/node';
import { dockerAvailable } from './docker.js';

declare module 'vitest' {
  export interface ProvidedContext {
    amqpUrl: string;
  }
}

const DEFAULT_AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';

/**
 * True when an AMQP 0-9-1 broker answers at `url`: sends the protocol header and waits for the
 * server's `connection.start` frame (frame type 1). Needs no client library.
 */
function reachable(url: string, timeoutMs = 3000): Promise<unknown> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port || 5672), hostname || '127.0.0.1');
    const done = (problem: unknown) => {
      socket.destroy();
      resolve(problem);
    };
    socket.setTimeout(timeoutMs, () => done(new Error('timed out')));
    socket.on('error', done);
    socket.on('connect', () => socket.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1')));
    socket.on('data', (data) => done(data[0] === 1 ? undefined : new Error('not an AMQP 0-9-1 broker')));
  });
}

function run(command: string, args: string[]): Promise<boolean> {
  return new Promise((resolve) => execFile(command, args, { timeout: 30_000 }, (error) => resolve(error === null)));
}

async function startLocalRabbit(url: string): Promise<boolean> {
  if (!(await run('sh', ['-c', 'command -v rabbitmq-server']))) return false;
  await run('sh', ['-c', 'setsid rabbitmq-server -detached >/dev/null 2>&1 || true']);
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if ((await reachable(url)) === undefined) return true;
    await new Promise((r) => setTimeout(r, 1000));
  }
  return false;
}

/**
 * Vitest global setup: finds a real RabbitMQ. `AMQP_URL` wins when set; otherwise the local
 * broker on 127.0.0.1:5672, started here (`rabbitmq-server -detached`) when installed but down;
 * otherwise a testcontainer when Docker is present. With none of these the run fails: RabbitMQ
 * tests never mock or skip the broker.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let stop = async () => {};
  let url = process.env.AMQP_URL ?? DEFAULT_AMQP_URL;
  let problem = await reachable(url);
  if (problem !== undefined && process.env.AMQP_URL === undefined) {
    if (await startLocalRabbit(url)) {
      problem = undefined;
    } else if (await dockerAvailable()) {
      // The RabbitMQ module is a dev dependency of @inboxed/amqp, so resolve it from there.
      const require = createRequire(new URL('../../packages/amqp/package.json', import.meta.url));
      const { RabbitMQContainer } = (await import(require.resolve('@testcontainers/rabbitmq'))) as {
        RabbitMQContainer: new (image: string) => { start(): Promise<{ getAmqpUrl(): string; stop(): Promise<unknown> }> };
      };
      const container = await new RabbitMQContainer('rabbitmq:3.13-alpine').start();
      url = container.getAmqpUrl();
      stop = async () => void (await container.stop());
      problem = undefined;
    }
  }
  if (problem !== undefined) {
    throw new Error(
      `RabbitMQ is not reachable at ${url} (${String((problem as Error)?.message ?? problem)}). ` +
        'Start it (setsid rabbitmq-server -detached), set AMQP_URL, or run Docker for testcontainers.',
    );
  }
  project.provide('amqpUrl', url);
  return stop;
}
