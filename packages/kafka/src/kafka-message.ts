import { decodePayload, type InboxError, type InboxMessage } from '@inboxed/core';
import type { KafkaHeaders, KafkaRecord } from './kafka-types.js';

/** Where a record sits: what the message-id fallback and dead-letter headers are made of. */
export interface RecordPosition {
  topic: string;
  partition: number;
}

/** A user-supplied message id extractor. Return `undefined` to fall back (see {@link MessageMappingOptions.messageIdFallback}). */
export type MessageIdExtractor = (record: KafkaRecord, position: RecordPosition) => string | undefined;

/** How records become inbox messages. */
export interface MessageMappingOptions {
  /** Header carrying the producer's message id. Default `'message-id'`. */
  messageIdHeader: string;
  /** Takes precedence over the header when given. */
  extractMessageId: MessageIdExtractor | undefined;
  /**
   * What to use when neither the extractor nor the header yields an id. `'record'` (default): the
   * record's identity `topic/partition/offset`, which is stable across redeliveries of that
   * record but NOT across producer retries that write a second copy. `'none'`: no id, so core
   * dead-letters the record with reason `missing-message-id`.
   */
  messageIdFallback: 'record' | 'none';
  /** `'json'` (default): values must be JSON; `'content-type'`: JSON only when the `content-type` header says so; `'raw'`: always a Buffer. */
  payload: 'json' | 'content-type' | 'raw';
}

/** A record mapped to an inbox message, or the reason it could not be decoded. */
export type MappedRecord = { ok: true; message: InboxMessage } | { ok: false; messageId: string; error: InboxError };

/** A header value as a string (kafkajs hands Buffers; repeated headers arrive as arrays: the first wins). */
export function headerString(value: KafkaHeaders[string]): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  if (first === undefined) return undefined;
  return typeof first === 'string' ? first : first.toString('utf8');
}

/** The record's identity, the message-id fallback: `topic/partition/offset`. */
export function recordIdentity(position: RecordPosition, offset: string): string {
  return `${position.topic}/${position.partition}/${offset}`;
}

function decodeHeaders(headers: KafkaHeaders | undefined): Record<string, string> {
  const decoded: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    const text = headerString(value);
    if (text !== undefined) decoded[name] = text;
  }
  return decoded;
}

/** The record's message id by the configured precedence: extractor, header, fallback. */
export function messageIdOf(record: KafkaRecord, position: RecordPosition, options: MessageMappingOptions): string | undefined {
  const extracted = options.extractMessageId?.(record, position);
  if (extracted !== undefined) return extracted;
  const header = headerString(record.headers?.[options.messageIdHeader]);
  if (header !== undefined) return header;
  return options.messageIdFallback === 'record' ? recordIdentity(position, record.offset) : undefined;
}

/**
 * Maps a Kafka record to the broker-neutral {@link InboxMessage}. The id is passed on as found
 * (even missing or empty): core validates it and dead-letters bad ids. A null value (tombstone)
 * decodes to `null` in JSON mode rather than failing to parse.
 */
export function toInboxMessage(record: KafkaRecord, position: RecordPosition, options: MessageMappingOptions): MappedRecord {
  const id = messageIdOf(record, position, options);
  const headers = decodeHeaders(record.headers);
  const decoded =
    record.value === null && options.payload === 'json'
      ? { ok: true as const, payload: null }
      : decodePayload(record.value, options.payload, headers['content-type']);
  if (!decoded.ok) return { ok: false, messageId: id ?? recordIdentity(position, record.offset), error: decoded.error };
  return {
    ok: true,
    message: {
      id: id as string,
      payload: decoded.payload,
      headers,
      receivedAt: new Date(),
      source: `kafka:${position.topic}/${position.partition}`,
    },
  };
}
