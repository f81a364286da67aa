import type { InboxOutcome } from '@inboxed/core';
import { deadLetterHeaders } from '@inboxed/core/adapter';
import { firstHeaderValue, setHeader } from './kafka-message.js';
import type { KafkaOutgoingRecord, KafkaProducerLike, KafkaRecord } from './kafka-types.js';

/** Kafka-specific dead-letter headers, next to core's `x-inboxed-*` set (`DeadLetterHeaders`). */
export const KafkaDeadLetterHeaders = {
  ORIGINAL_TOPIC: 'x-inboxed-original-topic',
  ORIGINAL_PARTITION: 'x-inboxed-original-partition',
  ORIGINAL_OFFSET: 'x-inboxed-original-offset',
  ORIGINAL_TIMESTAMP: 'x-inboxed-original-timestamp',
  GROUP_ID: 'x-inboxed-group-id',
} as const;

/** Where dead-letters of `topic` go: a fixed topic, or a function of the source topic. Default `<topic>.dlq`. */
export type DeadLetterTopicOption = string | ((topic: string) => string);

/** The dead-letter topic for records of `topic`. */
export function deadLetterTopicFor(option: DeadLetterTopicOption | undefined, topic: string): string {
  if (option === undefined) return `${topic}.dlq`;
  return typeof option === 'string' ? option : option(topic);
}

/** Where a dead-lettered record came from. */
export interface DeadLetterSource {
  topic: string;
  partition: number;
  /** The consumer group, for the `x-inboxed-group-id` header. */
  groupId: string | undefined;
}

/**
 * The dead-letter copy of a record: the original key and value bytes untouched (so it can be
 * replayed as is), the original headers, then the reason/error/attempt headers and where it came
 * from. inboxed's headers win over an original header of the same name.
 */
export function deadLetterRecord(record: KafkaRecord, source: DeadLetterSource, outcome: InboxOutcome, now: Date = new Date()): KafkaOutgoingRecord {
  const headers: Record<string, Buffer | string> = {};
  for (const [name, value] of Object.entries(record.headers ?? {})) {
    const first = firstHeaderValue(value);
    if (first !== undefined) setHeader(headers, name, first);
  }
  Object.assign(headers, deadLetterHeaders(outcome, now), {
    [KafkaDeadLetterHeaders.ORIGINAL_TOPIC]: source.topic,
    [KafkaDeadLetterHeaders.ORIGINAL_PARTITION]: String(source.partition),
    [KafkaDeadLetterHeaders.ORIGINAL_OFFSET]: record.offset,
    [KafkaDeadLetterHeaders.ORIGINAL_TIMESTAMP]: record.timestamp,
  });
  if (source.groupId !== undefined) headers[KafkaDeadLetterHeaders.GROUP_ID] = source.groupId;
  return { key: record.key, value: record.value, headers };
}

/**
 * Produces the dead-letter copies of a partition's records to `topic`, in order, and waits for every one to
 * be acknowledged by all in-sync replicas (`acks: -1`); rejects when any send failed (then the
 * caller commits nothing past them).
 */
export async function sendDeadLetters(
  producer: KafkaProducerLike,
  topic: string,
  source: DeadLetterSource,
  entries: { record: KafkaRecord; outcome: InboxOutcome }[],
  now: Date = new Date(),
): Promise<void> {
  const messages = entries.map(({ record, outcome }) => deadLetterRecord(record, source, outcome, now));
  await producer.send({ topic, messages, acks: -1 });
}
