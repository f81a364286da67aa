import { type Message, SQSClient } from '@aws-sdk/client-sqs';
import { InboxErrorCodes, type InboxProcessor } from '@inboxed/core';
import type { ConsumerOptions } from '@inboxed/core/adapter';
import { describe, expect, it } from 'vitest';
import { createSqsConsumer, createSqsHandler, type SqsConsumerOptions } from './index.js';

const handler = Object.assign(async () => ({ status: 'processed' as const, messageId: 'm', consumer: 'c' }), {
  kind: 'single' as const,
  consumer: 'c',
  checkTables: async () => {},
  observe: () => {},
}) as InboxProcessor;
const base = (): SqsConsumerOptions => ({ client: new SQSClient({ region: 'us-east-1' }), queueUrl: 'https://sqs.us-east-1.amazonaws.com/1/q', handler });

describe('createSqsConsumer options', () => {
  it.each([
    ['receiveMaxMessages', { receiveMaxMessages: 11 }],
    ['receiveMaxMessages', { receiveMaxMessages: 0 }],
    ['batchSize', { batchSize: 0 }],
    ['batchSize', { batchSize: 11 }],
    ['concurrency', { concurrency: 0 }],
    ['waitTimeSeconds', { waitTimeSeconds: 21 }],
    ['stopTimeoutMs', { stopTimeoutMs: -1 }],
    ['visibilityTimeoutSeconds', { visibilityTimeoutSeconds: 43_201 }],
    ['heartbeatIntervalMs', { visibilityTimeoutSeconds: 2, heartbeatIntervalMs: 2000 }],
    ['deleteAttempts', { deleteAttempts: 0 }],
    ['messageId.attribute', { messageId: { attribute: '' } }],
    ['messageId.extract', { messageId: { extract: 'body' as never } }],
    ['payload', { payload: 'xml' as never }],
    ['handler', { handler: (() => undefined) as never }],
    ['queueUrl', { queueUrl: '' }],
    ['deadLetterQueueUrl', { deadLetterQueueUrl: '' }],
    ['client', { client: {} as never }],
  ] as const)('rejects an invalid %s at construction with INVALID_OPTIONS', (name, extra) => {
    expect(() => createSqsConsumer({ ...base(), ...extra })).toThrow(
      expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS, message: expect.stringContaining(name) }),
    );
  });

  it('the handler validates the options it shares with the consumer', () => {
    expect(() => createSqsHandler({ ...base(), batchSize: 0 })).toThrow(expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS }));
  });

  it('takes the options every inboxed consumer takes, under the same names', () => {
    const shared: ConsumerOptions<Message, 'attribute'> = { ...base(), messageId: { attribute: 'id', fallback: true }, payload: 'raw', stopTimeoutMs: 5 };
    expect(() => createSqsConsumer(shared as SqsConsumerOptions)).not.toThrow();
    const sqs: ConsumerOptions<Message, 'attribute'> = base(); // SqsConsumerOptions extends the shared options
    expect(sqs.handler).toBe(handler);
  });

  it('accepts the defaults and starts idle: not connected, not consuming, nothing in flight', () => {
    const consumer = createSqsConsumer(base());
    expect(consumer.status()).toEqual({ state: 'idle', connected: false, consuming: false, inFlight: 0 });
  });
});
