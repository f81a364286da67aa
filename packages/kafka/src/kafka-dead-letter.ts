import { deadLetterHeaders, type InboxOutcome } from '@inboxed/core';
import type { KafkaOutgoingRecord, KafkaRecord } from './kafka-types.js';

/** Kafka-specific dead-letter headers, next to core's `x-inboxed-*` set from `deadLetterHeaders()`. */
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

/**
 * The dead-letter copy of a record: the original key and value bytes untouched (so it can be
 * replayed as is), the original headers, then the reason/error/attempt headers and where it came
 * from. inboxed's headers win over an original header of the same name.
 */
export function deadLetterRecord(
  record: KafkaRecord,
  source: { topic: string; partition: number; groupId: string | undefined },
  outcome: InboxOutcome,
  now: Date = new Date(),
): KafkaOutgoingRecord {
  const headers: Record<string, Buffer | string> = {};
  for (const [name, value] of Object.entries(record.headers ?? {})) {
    const first = Array.isArray(value) ? value[0] : value;
    if (first !== undefined) headers[name] = first;
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
