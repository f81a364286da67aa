import type { InboxMessage } from '../types.js';

// What adapters hand core for OpenTelemetry, free of OpenTelemetry types (public declarations must
// compile without `@opentelemetry/api` installed).

/**
 * Parses an AWS X-Ray trace header (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`,
 * what SQS carries as the `AWSTraceHeader` system attribute) into the W3C ids it maps to: the trace id
 * is the root's time and random parts joined (32 hex digits), the span id the parent (16). Undefined
 * when the header has no valid root or parent.
 */
export function parseXRayTraceHeader(header: string): { traceId: string; spanId: string; sampled: boolean } | undefined {
  const fields = new Map<string, string>();
  for (const part of header.split(';')) {
    const at = part.indexOf('=');
    if (at > 0) fields.set(part.slice(0, at).trim().toLowerCase(), part.slice(at + 1).trim());
  }
  const root = /^1-([0-9a-f]{8})-([0-9a-f]{24})$/i.exec(fields.get('root') ?? '');
  const parent = fields.get('parent') ?? '';
  if (root === null || !/^[0-9a-f]{16}$/i.test(parent)) return undefined;
  const traceId = `${root[1]}${root[2]}`.toLowerCase();
  const spanId = parent.toLowerCase();
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, sampled: fields.get('sampled') === '1' };
}

/** What a broker consumer tells core about its deliveries, for their spans and metrics. */
export interface MessagingContext {
  /** `messaging.system`: `rabbitmq`, `kafka`, `aws_sqs`, ... */
  system: string;
  /** `messaging.destination.name` (queue or topic) when one for the whole consumer; `callProcessor` may name one per call. */
  destination?: string | undefined;
  /** `messaging.consumer.group.name` (Kafka's group id). */
  consumerGroup?: string | undefined;
  /** Where a delivery's W3C trace context travels. @defaultValue `message.headers` */
  carrier?: ((message: InboxMessage) => Record<string, unknown> | undefined) | undefined;
  /** An AWS X-Ray trace header to continue when the carrier has no W3C context (SQS: the `AWSTraceHeader` system attribute). */
  xrayHeader?: ((message: InboxMessage) => string | undefined) | undefined;
}
