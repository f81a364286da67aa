import { inject } from 'vitest';
import { requireService } from './services.js';
import './kafka-setup.js';

/** The part of a kafkajs `Kafka` (or compatible) client this helper needs to create topics on a real broker. */
export interface KafkaAdminSource {
  admin(): {
    connect(): Promise<void>;
    createTopics(options: { topics: { topic: string; numPartitions: number }[]; waitForLeaders?: boolean }): Promise<boolean>;
    disconnect(): Promise<void>;
  };
}

/** The brokers provided by kafka-setup.ts, ready for `new Kafka({ brokers })`. */
export function kafkaBrokers(): string[] {
  return requireService('kafkaBrokers').split(',');
}

/**
 * Creates `topic` with `partitions` partitions: through the mock broker's control endpoint when
 * the tests run against librdkafka's mock (it has no CreateTopics API), with the admin API of
 * `kafka` otherwise.
 */
export async function createKafkaTopic(kafka: KafkaAdminSource, topic: string, partitions: number): Promise<void> {
  const control = inject('kafkaMockControl');
  if (control) {
    const response = await fetch(control, { method: 'POST', body: JSON.stringify({ topic, partitions }) });
    if (!response.ok) throw new Error(`creating topic ${topic} failed: ${await response.text()}`);
    return;
  }
  const admin = kafka.admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
}
