import { createKafkaTopic, kafkaBrokers } from '@inboxed/test-support/kafka-topics';
import { inject } from 'vitest';
import { Kafka, logLevel, type IHeaders, type KafkaMessage } from 'kafkajs';

/**
 * Group timings the librdkafka mock broker needs: with kafkajs defaults two members ping-pong
 * partitions for a long time. Real brokers work with these too.
 */
export const GROUP_TIMINGS = { sessionTimeout: 3000, heartbeatInterval: 300, maxWaitTimeInMs: 500, rebalanceTimeout: 6000 } as const;

/**
 * Options every test consumer gets: the mock broker reports controller id 0, which kafkajs'
 * idempotent producer cannot find, so dead-letters are produced non-idempotently there.
 */
export function brokerOptions(): { consumerConfig: typeof GROUP_TIMINGS; idempotentDeadLetters: boolean } {
  return { consumerConfig: GROUP_TIMINGS, idempotentDeadLetters: !inject('kafkaMockControl') };
}

/** A kafkajs client for the test broker. */
export function testKafka(clientId = 'inboxed-test'): Kafka {
  return new Kafka({ clientId, brokers: kafkaBrokers(), logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
}

/** Creates a topic with the partition count the test needs. */
export async function createTopic(kafka: Kafka, topic: string, partitions: number): Promise<void> {
  await createKafkaTopic(kafka, topic, partitions);
}

/** A record to produce in tests. */
export interface TestRecord {
  value: string | Buffer | object;
  partition?: number;
  key?: string;
  headers?: IHeaders;
  id?: string;
}

/** Produces records (acks -1), `id` going into the `message-id` header. */
export async function produce(kafka: Kafka, topic: string, records: TestRecord[]): Promise<void> {
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  try {
    await producer.send({
      topic,
      acks: -1,
      messages: records.map((r) => ({
        value: typeof r.value === 'string' || Buffer.isBuffer(r.value) ? r.value : JSON.stringify(r.value),
        ...(r.partition !== undefined ? { partition: r.partition } : {}),
        ...(r.key !== undefined ? { key: r.key } : {}),
        headers: { ...(r.headers ?? {}), ...(r.id !== undefined ? { 'message-id': r.id } : {}) },
      })),
    });
  } finally {
    await producer.disconnect();
  }
}

/** Committed offsets of a group for a topic, by partition (-1 when none). */
export async function committedOffsets(kafka: Kafka, groupId: string, topic: string): Promise<Record<number, number>> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const [entry] = await admin.fetchOffsets({ groupId, topics: [topic] });
    const result: Record<number, number> = {};
    for (const p of entry?.partitions ?? []) result[p.partition] = Number(p.offset);
    return result;
  } finally {
    await admin.disconnect();
  }
}

/** A consumed record with its position. */
export type ReadRecord = KafkaMessage & {
  topic: string;
  partition: number;
  headerText: Record<string, string>;
};

/** Reads `count` records of `topic` from the beginning with a throwaway group. */
export async function readTopic(kafka: Kafka, topic: string, count: number, timeoutMs = 20_000): Promise<ReadRecord[]> {
  const consumer = kafka.consumer({ groupId: `reader-${topic}-${Math.random().toString(36).slice(2, 8)}`, ...GROUP_TIMINGS });
  const records: ReadRecord[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    let done: () => void = () => {};
    const enough = new Promise<void>((resolve) => (done = resolve));
    await consumer.run({
      eachMessage: async ({ topic: t, partition, message }) => {
        const headerText: Record<string, string> = {};
        for (const [name, value] of Object.entries(message.headers ?? {})) headerText[name] = String(Array.isArray(value) ? value[0] : value);
        records.push({ ...message, topic: t, partition, headerText });
        if (records.length >= count) done();
      },
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      enough,
      new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`read ${records.length}/${count} records of ${topic} in ${timeoutMs} ms`)), timeoutMs))),
    ]);
    clearTimeout(timer);
    return records;
  } finally {
    await consumer.disconnect();
  }
}
