import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { configureTelemetry } from '@inboxed/core';
import { useInMemoryTracing, waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { sqsTestContext } from '../test/sqs-test-kit.js';
import { createSqsHandler } from './index.js';

// The delivery span continues the producer's trace from the `traceparent` message attribute, or
// else from X-Ray's `AWSTraceHeader` system attribute, and core's transaction span nests under it.
describe('OpenTelemetry on SQS', () => {
  const ctx = sqsTestContext();
  const exporter = useInMemoryTracing(configureTelemetry);

  it('process span: child of the traceparent attribute, queue attributes, the transaction span inside it', async () => {
    const h = await ctx.queues();
    await h.send(
      { to: 'ada' },
      { id: 'mail-1', attributes: { traceparent: { DataType: 'String', StringValue: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } } },
    );
    const consumer = await ctx.start(h, { handler: ctx.inbox() });
    const queue = h.queueUrl.slice(h.queueUrl.lastIndexOf('/') + 1);
    const delivery = await waitFor('the delivery span', () => exporter.getFinishedSpans().find((s) => s.name === `process ${queue}`));
    expect(delivery.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(delivery.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(delivery.attributes).toMatchObject({
      'messaging.system': 'aws_sqs',
      'messaging.destination.name': queue,
      'messaging.message.id': 'mail-1',
      'inboxed.outcome.status': 'processed',
    });
    const transaction = exporter.getFinishedSpans().find((s) => s.name === 'inboxed transaction');
    expect(transaction?.parentSpanContext?.spanId).toBe(delivery.spanContext().spanId);

    await consumer.stop();

    // The emulator does not return AWSTraceHeader (SQS sets it from X-Ray): a message received as
    // usual, with the system attribute SQS would add, through the low-level handler.
    await h.send({ to: 'grace' }, { id: 'mail-2' });
    const { Messages = [] } = await h.client.send(
      new ReceiveMessageCommand({ QueueUrl: h.queueUrl, WaitTimeSeconds: 5, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }),
    );
    const received = Messages.map((m) => ({
      ...m,
      Attributes: { ...m.Attributes, AWSTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1' },
    }));
    const { results } = await createSqsHandler({
      client: h.client,
      queueUrl: h.queueUrl,
      deadLetterQueueUrl: h.deadLetterQueueUrl,
      handler: ctx.inbox(),
    }).handle(received);
    expect(results.map((r) => r.outcome?.status)).toEqual(['processed']);
    const traced = exporter.getFinishedSpans().find((s) => s.attributes['messaging.message.id'] === 'mail-2' && s.name.startsWith('process'))!;
    expect(traced.spanContext().traceId).toBe('5759e988bd862e3fe1be46a994272793');
    expect(traced.parentSpanContext?.spanId).toBe('53995c3f42cd8ad8');
  });
});
