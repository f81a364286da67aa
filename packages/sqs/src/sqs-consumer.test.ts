import { SQSClient } from '@aws-sdk/client-sqs';
import { InboxErrorCodes, type InboxProcessor } from '@inboxed/core';
import { describe, expect, it } from 'vitest';
import { createSqsConsumer, type SqsConsumerOptions } from './sqs-consumer.js';

const handler = Object.assign(async () => ({ status: 'processed' as const, messageId: 'm', consumer: 'c' }), {
  kind: 'single' as const,
  consumer: 'c',
  checkTables: async () => {},
}) as InboxProcessor;
const base = (): SqsConsumerOptions => ({ client: new SQSClient({ region: 'us-east-1' }), queueUrl: 'https://sqs.us-east-1.amazonaws.com/1/q', handler });

describe('createSqsConsumer options', () => {
  it.each([
    ['batchSize', { batchSize: 11 }],
    ['batchSize', { batchSize: 0 }],
    ['concurrency', { concurrency: 0 }],
    ['waitTimeSeconds', { waitTimeSeconds: 21 }],
    ['visibilityTimeoutSeconds', { visibilityTimeoutSeconds: 43_201 }],
    ['heartbeatIntervalMs', { visibilityTimeoutSeconds: 2, heartbeatIntervalMs: 2000 }],
    ['handler', { handler: (() => undefined) as never }],
    ['queueUrl', { queueUrl: '' }],
    ['client', { client: {} as never }],
  ] as const)('rejects an invalid %s at construction with INVALID_OPTIONS', (name, extra) => {
    expect(() => createSqsConsumer({ ...base(), ...extra })).toThrow(
      expect.objectContaining({ code: InboxErrorCodes.INVALID_OPTIONS, message: expect.stringContaining(name) }),
    );
  });

  it('accepts the defaults and reports a stopped status', () => {
    const consumer = createSqsConsumer(base());
    expect(consumer.status).toEqual({ isRunning: false, polling: 0, inFlight: 0 });
  });
});
