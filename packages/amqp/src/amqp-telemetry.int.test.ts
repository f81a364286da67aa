import { configureTelemetry } from '@inboxed/core';
import { useInMemoryTracing, waitFor } from '@inboxed/test-support';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AmqpTestKit, createAmqpTestKit } from '../test/amqp-test-kit.js';

// The delivery span continues the producer's trace from the AMQP `traceparent` header, and core's
// transaction span nests under it. Metrics and the batch links are proven once, in core.
describe('OpenTelemetry on RabbitMQ', () => {
  const exporter = useInMemoryTracing(configureTelemetry);
  let k: AmqpTestKit;
  beforeEach(async () => {
    k = await createAmqpTestKit('amqp-otel');
  });
  afterEach(async () => {
    await k.close();
  });

  it('process span: child of the traceparent header, messaging attributes, the transaction span inside it', async () => {
    const consumer = k.consume(k.processor());
    await consumer.start();
    await k.h.publishRaw({ orderId: 1 }, { messageId: 'order-1', headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } });
    const delivery = await waitFor('the delivery span', () => exporter.getFinishedSpans().find((s) => s.name === `process ${k.h.queue}`));
    expect(delivery.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(delivery.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(delivery.attributes).toMatchObject({
      'messaging.system': 'rabbitmq',
      'messaging.destination.name': k.h.queue,
      'messaging.operation.type': 'process',
      'messaging.message.id': 'order-1',
      'inboxed.outcome.status': 'processed',
    });
    const transaction = exporter.getFinishedSpans().find((s) => s.name === 'inboxed transaction');
    expect(transaction?.parentSpanContext?.spanId).toBe(delivery.spanContext().spanId);
  });
});
