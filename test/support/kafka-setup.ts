import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { TestProject } from 'vitest/node';
import { startKafkaControllerProxy } from './kafka-controller-proxy.js';
import { startKafkaMock } from './kafka-mock.js';
import { dockerAvailable } from './docker.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Comma-separated `host:port` list of the Kafka-protocol broker under test. */
    kafkaBrokers: string;
    /**
     * URL of the mock broker's topic-creation endpoint, or '' when the broker is a real Kafka
     * (then tests create topics with the admin API). See `createKafkaTopic`.
     */
    kafkaMockControl: string;
  }
}

/** `@testcontainers/kafka` is installed by @inboxed/kafka only; resolve it from there. */
async function startKafkaContainer(): Promise<{ brokers: string; stop: () => Promise<void> }> {
  const require = createRequire(new URL('../../packages/kafka/package.json', import.meta.url));
  const { KafkaContainer } = (await import(require.resolve('@testcontainers/kafka'))) as {
    KafkaContainer: new (
      image: string,
    ) => { withKraft(): { start(): Promise<{ getHost(): string; getMappedPort(port: number): number; stop(): Promise<unknown> }> } };
  };
  const container = await new KafkaContainer('confluentinc/cp-kafka:7.6.1').withKraft().start();
  return { brokers: `${container.getHost()}:${container.getMappedPort(9093)}`, stop: async () => void (await container.stop()) };
}

/** Forwards `POST /topics {"topic","partitions"}` from test workers to the mock broker process. */
function controlServer(createTopic: (topic: string, partitions: number) => Promise<void>): Promise<{ server: Server; url: string }> {
  const server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      let topic = '';
      let partitions = 0;
      try {
        ({ topic, partitions } = JSON.parse(body) as { topic: string; partitions: number });
      } catch {
        response.writeHead(400).end('invalid JSON');
        return;
      }
      createTopic(topic, partitions).then(
        () => response.writeHead(204).end(),
        (error: unknown) => response.writeHead(500).end(String(error)),
      );
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      resolve({ server, url: `http://127.0.0.1:${port}/topics` });
    }),
  );
}

/**
 * Vitest global setup: finds a Kafka-protocol broker. `KAFKA_BROKERS` wins when set; otherwise
 * librdkafka's mock cluster (built from kafka-mock/mock-cluster.c with gcc + librdkafka-dev) is
 * started for the run; testcontainers' Kafka is used only when the mock cannot be built and a
 * Docker engine is present. With none of these the run fails: tests never mock or skip the broker.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (process.env.KAFKA_BROKERS) {
    project.provide('kafkaBrokers', process.env.KAFKA_BROKERS);
    project.provide('kafkaMockControl', '');
    return async () => {};
  }
  let mockProblem: unknown;
  try {
    const mock = await startKafkaMock();
    const control = await controlServer(mock.createTopic);
    // Clients talk to the mock through a proxy that gives it the controller it lacks, so kafkajs's
    // idempotent producer (the adapter's default for dead-letters) works against it too.
    const proxy = await startKafkaControllerProxy(mock.brokers);
    project.provide('kafkaBrokers', proxy.brokers);
    project.provide('kafkaMockControl', control.url);
    return async () => {
      await new Promise((resolve) => control.server.close(resolve));
      await proxy.close();
      await mock.stop();
    };
  } catch (error) {
    mockProblem = error;
  }
  if (await dockerAvailable()) {
    const container = await startKafkaContainer();
    project.provide('kafkaBrokers', container.brokers);
    project.provide('kafkaMockControl', '');
    return container.stop;
  }
  throw new Error(
    `No Kafka broker for the tests: KAFKA_BROKERS is unset, the librdkafka mock broker could not start ` +
      `(${(mockProblem as Error)?.message ?? String(mockProblem)}), and no Docker engine is available for testcontainers.`,
  );
}
