// The Kafka side of the conformance suite and the soak (test/conformance/harness.ts), also the
// fixture of this package's own broker-specific tests: one topic, its dead-letter topic and one
// consumer group per harness, on the test broker (librdkafka's mock cluster unless KAFKA_BROKERS).
// Everything it reports (pending, dead-letters, committed offsets) is read from the broker.
import type { AnyInboxProcessor, InboxOutcome } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';
import { uniqueName } from '@inboxed/test-support';
import { createKafkaTopic, kafkaBrokers } from '@inboxed/test-support/kafka-topics';
import { requiredEnv } from '@inboxed/test-support/worker-env';
import { type Admin, type Consumer, type IHeaders, Kafka, type KafkaMessage, logLevel, type Producer } from 'kafkajs';
import type { BrokerHarness, ConsumerSettings, DeadLetter, HarnessModule, PublishedMessage } from '../../../test/conformance/harness.js';
import { createKafkaConsumer, type KafkaConsumerOptions } from '../src/index.js';

/**
 * Group timings the librdkafka mock broker needs (with kafkajs' defaults two members ping-pong
 * partitions for a long time), and that make a SIGKILLed member's partitions move on after 3 s.
 * Real brokers work with these too.
 */
export const GROUP_TIMINGS = { sessionTimeout: 3000, heartbeatInterval: 300, maxWaitTimeInMs: 500, rebalanceTimeout: 6000 } as const;
/** Partitions of a harness topic: several, so the soak's three workers share the work and kills cause rebalances. */
export const PARTITIONS = 6;
/** Records per `producer.send()` when publishing. */
const PUBLISH_CHUNK = 2_000;

/** A kafkajs client for the test broker. */
export function testKafka(brokers: string[] = kafkaBrokers(), clientId = 'inboxed-test'): Kafka {
  return new Kafka({ clientId, brokers, logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
}

/** Options of every consumer of a harness topic: fast holds, short group timings, three partitions at a time. */
export function consumerOptions(kafka: Kafka, topic: string, groupId: string): Omit<KafkaConsumerOptions, 'handler'> {
  return {
    kafka,
    groupId,
    topics: [topic],
    consumerConfig: GROUP_TIMINGS,
    partitionsConsumedConcurrently: 3,
    retryBackoff: { baseDelayMs: 50, maxDelayMs: 500 },
  };
}

/** A record to produce as is (tests that need partitions, keys or headers of their own). */
export interface TestRecord {
  value: string | Buffer | object | null;
  partition?: number;
  key?: string;
  headers?: IHeaders;
  /** Goes into the `message-id` header. */
  id?: string;
}

/** A consumed record with its position and its headers as text. */
export type ReadRecord = KafkaMessage & { topic: string; partition: number; headerText: Record<string, string> };

/** The Kafka harness: the shared interface plus what this package's own tests need. */
export interface KafkaHarness extends BrokerHarness {
  readonly kafka: Kafka;
  readonly topic: string;
  readonly deadLetterTopic: string;
  readonly groupId: string;
  /** `createKafkaConsumer` options for this topic and group, for tests that need more than `createConsumer`. */
  options(handler: AnyInboxProcessor): KafkaConsumerOptions;
  /** Produces raw records (acks -1), in order. */
  produce(records: TestRecord[]): Promise<void>;
  /** The group's committed offset per partition (-1: none). */
  committed(): Promise<Record<number, number>>;
  /** Every record of the dead-letter topic so far, with its headers. */
  deadLetterRecords(): Promise<ReadRecord[]>;
}

const headerText = (headers: IHeaders | undefined): Record<string, string> =>
  Object.fromEntries(Object.entries(headers ?? {}).map(([name, value]) => [name, String(Array.isArray(value) ? value[0] : value)]));

/** A harness on its own topic (`PARTITIONS` partitions unless told), dead-letter topic and group. */
export function createHarness(settings: { partitions?: number } = {}): KafkaHarness {
  const kafka = testKafka();
  const topic = uniqueName('conf');
  const deadLetterTopic = `${topic}.dlq`;
  const groupId = uniqueName('group');
  let admin: Admin | undefined;
  let producer: Producer | undefined;
  let reader: { consumer: Consumer; records: ReadRecord[]; ready: Promise<void> } | undefined;

  const connectedAdmin = async () => {
    if (admin === undefined) {
      admin = kafka.admin();
      await admin.connect();
    }
    return admin;
  };
  const send = async (messages: Array<{ key?: string | null; value: string | Buffer | null; partition?: number; headers?: IHeaders }>) => {
    if (producer === undefined) {
      producer = kafka.producer();
      await producer.connect();
    }
    for (let i = 0; i < messages.length; i += PUBLISH_CHUNK) await producer.send({ topic, acks: -1, messages: messages.slice(i, i + PUBLISH_CHUNK) });
  };
  /** Reads the dead-letter topic with a group of its own, from the beginning, for as long as the harness lives. */
  const deadLetterReader = () => {
    if (reader !== undefined) return reader;
    const consumer = kafka.consumer({ groupId: uniqueName('dlq_reader'), ...GROUP_TIMINGS });
    const records: ReadRecord[] = [];
    const ready = (async () => {
      await consumer.connect();
      await consumer.subscribe({ topics: [deadLetterTopic], fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ topic: t, partition, message }) =>
          void records.push({ ...message, topic: t, partition, headerText: headerText(message.headers) }),
      });
    })();
    reader = { consumer, records, ready };
    return reader;
  };
  const deadLetterRecords = async (): Promise<ReadRecord[]> => {
    const { records, ready } = deadLetterReader();
    await ready;
    const ends = await (await connectedAdmin()).fetchTopicOffsets(deadLetterTopic);
    const deadline = Date.now() + 15_000;
    // Everything produced so far: each partition read up to its high watermark.
    const caughtUp = () => ends.every((end) => records.filter((r) => r.partition === end.partition).length >= Number(end.high) - Number(end.low));
    while (!caughtUp()) {
      if (Date.now() > deadline) throw new Error(`the dead-letter topic ${deadLetterTopic} was not read to its end within 15 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return [...records];
  };

  const harness: KafkaHarness = {
    broker: 'kafka',
    kafka,
    topic,
    deadLetterTopic,
    groupId,
    async setup() {
      await createKafkaTopic(kafka, topic, settings.partitions ?? PARTITIONS);
      await createKafkaTopic(kafka, deadLetterTopic, 3);
      // Joining a group takes the mock 3 s: let the reader join now, while the test's consumer does.
      deadLetterReader().ready.catch(() => undefined);
    },
    async teardown() {
      // The topics stay: librdkafka's mock cluster cannot delete topics (it goes away with the test run).
      await reader?.consumer.disconnect().catch(() => undefined);
      await producer?.disconnect().catch(() => undefined);
      await admin?.disconnect().catch(() => undefined);
    },
    async publish(messages: PublishedMessage[]) {
      await send(
        messages.map((m) => ({
          // Copies of one id share a partition, so they arrive in the order published.
          key: m.id ?? null,
          value: m.body ?? JSON.stringify(m.payload ?? null),
          headers: { 'content-type': 'application/json', ...(m.id === undefined ? {} : { 'message-id': m.id }) },
        })),
      );
    },
    produce: (records) =>
      send(
        records.map((r) => ({
          value: r.value === null || typeof r.value === 'string' || Buffer.isBuffer(r.value) ? r.value : JSON.stringify(r.value),
          ...(r.partition !== undefined ? { partition: r.partition } : {}),
          ...(r.key !== undefined ? { key: r.key } : {}),
          headers: { ...(r.headers ?? {}), ...(r.id !== undefined ? { 'message-id': r.id } : {}) },
        })),
      ),
    options: (handler) => ({ ...consumerOptions(kafka, topic, groupId), handler }),
    createConsumer(handler: AnyInboxProcessor, consumerSettings: ConsumerSettings = {}): InboxConsumer {
      return createKafkaConsumer({ ...harness.options(handler), ...consumerSettings });
    },
    async committed() {
      const [entry] = await (await connectedAdmin()).fetchOffsets({ groupId, topics: [topic] });
      return Object.fromEntries((entry?.partitions ?? []).map((p) => [p.partition, Number(p.offset)]));
    },
    /** Sum over the topic's partitions of the high watermark minus the group's committed offset (or the low watermark without one). */
    async pending() {
      const [ends, committed] = await Promise.all([(await connectedAdmin()).fetchTopicOffsets(topic), harness.committed()]);
      return ends.reduce((sum, end) => sum + Math.max(0, Number(end.high) - Math.max(Number(end.low), committed[end.partition] ?? -1)), 0);
    },
    deadLetterRecords,
    async deadLetters(): Promise<DeadLetter[]> {
      return (await deadLetterRecords()).map((r) => ({
        id: r.headerText['x-inboxed-message-id'],
        reason: r.headerText['x-inboxed-reason'],
        errorCode: r.headerText['x-inboxed-error-code'],
        body: r.value?.toString('utf8') ?? '',
      }));
    },
    workerEnv: () => ({ KAFKA_BROKERS: kafkaBrokers().join(','), KAFKA_TOPIC: topic, KAFKA_GROUP_ID: groupId }),
  };
  return harness;
}

/** The shared worker's consumer (test/conformance/worker.ts), from `workerEnv()`. */
export function createWorkerConsumer(
  env: NodeJS.ProcessEnv,
  handler: AnyInboxProcessor,
  beforeSettle: (outcome: InboxOutcome) => void | Promise<void>,
): InboxConsumer {
  const required = (name: string) => requiredEnv(env, name, 'kafka worker');
  const kafka = testKafka(required('KAFKA_BROKERS').split(','), `worker-${process.pid}`);
  return createKafkaConsumer({ ...consumerOptions(kafka, required('KAFKA_TOPIC'), required('KAFKA_GROUP_ID')), handler, beforeSettle });
}

createHarness satisfies HarnessModule['createHarness'];
createWorkerConsumer satisfies HarnessModule['createWorkerConsumer'];
