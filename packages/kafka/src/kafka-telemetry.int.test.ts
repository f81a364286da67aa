import { configureTelemetry, withInbox } from '@inboxed/core';
import { useInMemoryTracing, waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { useKafkaTestKit } from '../test/kafka-test-kit.js';

// The delivery span continues the producer's trace from the record's `traceparent` header (kafkajs
// hands header values as Buffers), and core's transaction span nests under it.
describe('OpenTelemetry on Kafka', () => {
  const k = useKafkaTestKit({ partitions: 1, label: 'kafka-otel' });
  const exporter = useInMemoryTracing(configureTelemetry);

  it('process span: child of the traceparent header, topic and group attributes, the transaction span inside it', async () => {
    const processor = withInbox(
      async (message, tx: any) => {
        await tx.insert(k.t.effects).values({ messageId: message.id });
      },
      { db: k.t.db, consumer: 'billing', tables: { schema: k.t.schema } },
    );
    await k.h.produce([
      { id: 'pay-1', value: { amount: 1 }, headers: { traceparent: Buffer.from('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') } },
    ]);
    await k.start(processor);
    const delivery = await waitFor('the delivery span', () => exporter.getFinishedSpans().find((s) => s.name === `process ${k.h.topic}`));
    expect(delivery.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(delivery.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(delivery.attributes).toMatchObject({
      'messaging.system': 'kafka',
      'messaging.destination.name': k.h.topic,
      'messaging.consumer.group.name': k.h.groupId,
      'messaging.message.id': 'pay-1',
      'inboxed.outcome.status': 'processed',
    });
    const transaction = exporter.getFinishedSpans().find((s) => s.name === 'inboxed transaction');
    expect(transaction?.parentSpanContext?.spanId).toBe(delivery.spanContext().spanId);
  });
});
