import type { Attributes, Context, Link, Span, SpanContext, TextMapGetter } from '@opentelemetry/api';
import type { InboxMessage, InboxOutcome } from '../types.js';
import { type MessagingContext, parseXRayTraceHeader } from './messaging.js';
import { currentTracerProvider, otelApi, type OtelApi, perProvider, SCOPE_NAME } from './api.js';
import { inContext, safely } from './guard.js';
import { Attr, defined, messagingAttributes, outcomeErrorType, recordConsumed, recordingMetrics, recordProcessDuration, stableReason } from './instruments.js';

/** @internal The tracer of the current tracer provider. */
const tracer = perProvider(currentTracerProvider, (provider, _otel, version) => provider.getTracer(SCOPE_NAME, version));

/** Context key of a batch processor call: each delivery's span context by message id, for the transaction spans' links. */
let deliveriesKey: symbol | undefined;
const deliveriesKeyOf = (otel: OtelApi): symbol => (deliveriesKey ??= otel.createContextKey('inboxed.deliveries'));

/** The API's no-op tracer provider: what the global proxy provider delegates to while none is registered. */
let noopTracerProvider: object | undefined;
let probeKey: symbol | undefined;

/**
 * True when no delivery span could ever be seen: the tracer provider is the global proxy with no
 * provider registered behind it (its spans record nothing), and no context manager is registered
 * (`context.with` makes nothing active, so neither the processor nor a propagator sees a delivery's
 * context). Then spans per delivery are pure cost and are skipped. Checked per call: a provider or
 * context manager registered later is picked up at once.
 */
function tracingInert(otel: OtelApi): boolean {
  const provider = currentTracerProvider(otel);
  if (!(provider instanceof otel.ProxyTracerProvider)) return false;
  noopTracerProvider ??= new otel.ProxyTracerProvider().getDelegate();
  if (provider.getDelegate() !== noopTracerProvider) return false;
  probeKey ??= otel.createContextKey('inboxed.context-probe');
  const probe = otel.ROOT_CONTEXT.setValue(probeKey, true);
  return otel.context.with(probe, () => otel.context.active() !== probe);
}

/** A header value as text: strings as they are, bytes (Kafka headers, SQS binary attributes) as UTF-8, the first of repeated ones. */
function headerText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('utf8');
  if (Array.isArray(value)) return headerText(value[0]);
  return undefined;
}

/** Reads W3C trace context (`traceparent`, `tracestate`) from a message's headers, whatever their case and encoding. */
const headerGetter: TextMapGetter<Record<string, unknown>> = {
  keys: (carrier) => Object.keys(carrier),
  get(carrier, key) {
    if (key in carrier) return headerText(carrier[key]);
    const lower = key.toLowerCase();
    for (const name of Object.keys(carrier)) if (name.toLowerCase() === lower) return headerText(carrier[name]);
    return undefined;
  },
};

/** The producer's context carried by a delivery (W3C headers, then X-Ray), on top of the active context. */
function producerContext(otel: OtelApi, message: InboxMessage, messaging: MessagingContext | undefined): Context {
  const active = otel.context.active();
  const carrier = messaging?.carrier !== undefined ? messaging.carrier(message) : message.headers;
  if (carrier !== undefined && carrier !== null) {
    const extracted = otel.propagation.extract(active, carrier, headerGetter);
    if (otel.trace.getSpanContext(extracted)?.isRemote === true) return extracted;
  }
  const xray = messaging?.xrayHeader?.(message);
  const parsed = xray === undefined ? undefined : parseXRayTraceHeader(xray);
  if (parsed === undefined) return active;
  const remote: SpanContext = {
    traceId: parsed.traceId,
    spanId: parsed.spanId,
    traceFlags: parsed.sampled ? otel.TraceFlags.SAMPLED : otel.TraceFlags.NONE,
    isRemote: true,
  };
  return otel.trace.setSpanContext(active, remote);
}

/** @internal Runs `call` per delivery or per batch inside the delivery spans' context, recording the process metrics. */
export interface DeliveryTelemetry {
  /** A per-message processor call for delivery `index`: runs inside its span, which ends with the outcome. */
  one(index: number, call: () => Promise<InboxOutcome>): Promise<InboxOutcome>;
  /** A batch processor call: its transaction spans link to every delivery span; each ends with its outcome. */
  batch(call: () => Promise<InboxOutcome[]>): Promise<InboxOutcome[]>;
}

function endDelivery(otel: OtelApi, span: Span, outcome: InboxOutcome | undefined): void {
  // Two guarded steps: a malformed outcome (a wrapper that returned something else) still ends the span.
  if (outcome !== undefined) safely(() => describeOutcome(otel, span, outcome), undefined);
  safely(() => span.end(), undefined);
}

function describeOutcome(otel: OtelApi, span: Span, outcome: InboxOutcome): void {
  span.setAttributes(
    defined({
      [Attr.STATUS]: outcome.status,
      [Attr.REASON]: stableReason(outcome),
      [Attr.ERROR_TYPE]: outcomeErrorType(outcome),
      [Attr.FENCING_TOKEN]: outcome.fencingToken,
      [Attr.TAKEOVER]: outcome.takeover,
    }),
  );
  if (outcome.status === 'retry' || outcome.status === 'dead-letter' || outcome.status === 'conflict') {
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: outcome.error.message });
  }
}

/**
 * @internal Starts one `process <destination>` span (kind CONSUMER) per delivery, each a child of
 * the producer's context the delivery carries, and counts the deliveries as consumed. Undefined
 * without `@opentelemetry/api`, or when neither spans nor metrics would record anything; no spans
 * when tracing is inert (see {@link tracingInert}).
 */
export function startDeliveries(
  messages: readonly InboxMessage[],
  consumer: string,
  messaging: MessagingContext | undefined,
  destination: string | undefined,
): DeliveryTelemetry | undefined {
  return safely(() => deliveryTelemetry(messages, consumer, messaging, destination), undefined);
}

function deliveryTelemetry(
  messages: readonly InboxMessage[],
  consumer: string,
  messaging: MessagingContext | undefined,
  destination: string | undefined,
): DeliveryTelemetry | undefined {
  const otel = otelApi();
  if (otel === null) return undefined;
  const spans = tracingInert(otel) ? undefined : tracer();
  // Neither spans nor metrics would record anything: no per-delivery work at all.
  if (spans === undefined && !recordingMetrics()) return undefined;
  const metricAttributes: Attributes = { ...messagingAttributes(messaging, destination), [Attr.OPERATION_NAME]: 'process' };
  recordConsumed(messages.length, metricAttributes);
  const where = destination ?? messaging?.destination;
  const name = where === undefined ? 'process' : `process ${where}`;
  const started = performance.now();
  const deliveries = (spans === undefined ? [] : messages).map((message) => {
    const parent = producerContext(otel, message, messaging);
    const span = spans!.startSpan(
      name,
      {
        kind: otel.SpanKind.CONSUMER,
        attributes: {
          ...metricAttributes,
          ...defined({ [Attr.OPERATION_TYPE]: 'process', [Attr.MESSAGE_ID]: message.id, [Attr.CONSUMER]: consumer, [Attr.ATTEMPT]: message.attempt }),
        },
      },
      parent,
    );
    return { span, context: otel.trace.setSpan(parent, span) };
  });
  const seconds = () => (performance.now() - started) / 1000;
  return {
    async one(index, call) {
      const delivery = deliveries[index];
      let outcome: InboxOutcome | undefined;
      try {
        outcome = delivery === undefined ? await call() : await inContext(otel, delivery.context, call);
        return outcome;
      } finally {
        // Guarded: a processor may have returned something that is not an outcome (a wrapper that forgot to return it).
        safely(() => recordProcessDuration(seconds(), metricAttributes, outcome === undefined ? '_OTHER' : outcomeErrorType(outcome)), undefined);
        if (delivery !== undefined) endDelivery(otel, delivery.span, outcome);
      }
    },
    async batch(call) {
      let outcomes: InboxOutcome[] | undefined;
      try {
        if (spans === undefined) {
          outcomes = await call();
          return outcomes;
        }
        const linked = safely(() => {
          const links = new Map(messages.map((message, i) => [message.id, deliveries[i]!.span.spanContext()]));
          return otel.context.active().setValue(deliveriesKeyOf(otel), links);
        }, undefined);
        outcomes = await (linked === undefined ? call() : inContext(otel, linked, call));
        return outcomes;
      } finally {
        safely(() => {
          const failed = outcomes?.map(outcomeErrorType).find((type) => type !== undefined);
          recordProcessDuration(seconds(), { ...metricAttributes, [Attr.BATCH_COUNT]: messages.length }, outcomes === undefined ? '_OTHER' : failed);
        }, undefined);
        for (const [i, delivery] of deliveries.entries())
          if (delivery !== undefined)
            endDelivery(
              otel,
              delivery.span,
              safely(() => outcomes?.[i], undefined),
            );
      }
    },
  };
}

/** @internal A span of core's own work (an inbox transaction, a leased claim), current while `run` runs. */
export interface InternalSpan {
  run<T>(call: () => Promise<T>): Promise<T>;
  end(attributes: Attributes, error?: { type: string; message: string }): void;
}

/**
 * @internal Starts an INTERNAL span under the active context (a delivery span when a per-message
 * processor runs in an adapter). In a batch processor's call, it links to the delivery spans of
 * `messageIds` instead: a batch transaction belongs to several deliveries, so it has no delivery as
 * its parent. Undefined without `@opentelemetry/api`.
 */
export function startInternalSpan(name: string, attributes: Attributes, messageIds: readonly string[]): InternalSpan | undefined {
  return safely(() => internalSpan(name, attributes, messageIds), undefined);
}

function internalSpan(name: string, attributes: Attributes, messageIds: readonly string[]): InternalSpan | undefined {
  const otel = otelApi();
  const spans = tracer();
  if (otel === null || spans === undefined) return undefined;
  const active = otel.context.active();
  const deliveries = active.getValue(deliveriesKeyOf(otel)) as Map<string, SpanContext> | undefined;
  const links: Link[] = [];
  if (deliveries !== undefined) {
    for (const id of new Set(messageIds)) {
      const context = deliveries.get(id);
      if (context !== undefined) links.push({ context });
    }
  }
  const span = spans.startSpan(name, { kind: otel.SpanKind.INTERNAL, attributes, links }, active);
  const context = otel.trace.setSpan(active.deleteValue(deliveriesKeyOf(otel)), span);
  return {
    run: (call) => inContext(otel, context, call),
    end(attributes, error) {
      safely(() => {
        span.setAttributes(error === undefined ? attributes : { ...attributes, [Attr.ERROR_TYPE]: error.type });
        if (error !== undefined) span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error.message });
        span.end();
      }, undefined);
    },
  };
}
