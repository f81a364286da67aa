import { backoffDelay } from '../backoff.js';
import { describeError } from '../error-text.js';
import { InboxError, InboxErrorCodes } from '../errors.js';
import { isBatchProcessor, OutcomeReasons, type AnyInboxProcessor, type InboxMessage, type InboxOutcome, type ProcessOptions } from '../types.js';
import { type DeliveryTelemetry, startDeliveries } from '../telemetry/spans.js';
import { type ConsumerEventEmitter, markDecided } from './events.js';

/** The outcome of a delivery whose processor threw: retried (not counted), never lost or acked. */
function processorThrew(processor: AnyInboxProcessor, message: InboxMessage, error: InboxError): InboxOutcome {
  return {
    status: 'retry',
    messageId: typeof message.id === 'string' ? message.id : String(message.id),
    consumer: processor.consumer,
    reason: OutcomeReasons.PROCESSOR_THREW,
    error,
    attempt: message.attempt ?? 1,
    retryAfterMs: backoffDelay(message.attempt ?? 1),
  };
}

const STATUSES: ReadonlySet<unknown> = new Set(['processed', 'duplicate', 'rejected', 'retry', 'busy', 'dead-letter', 'conflict']);

/**
 * What is wrong with a value a processor resolved to, or undefined when it is an outcome adapters
 * can act on: a known `status`, text ids, a wait for `retry`/`busy`, an error for the statuses that
 * carry one. A wrapper that forgot to `return await next(message)` resolves to `undefined`; read
 * as an outcome, that threw deep inside an adapter, where the delivery was neither settled nor
 * counted. Reading a hostile value (a getter that throws) is a malformed outcome too.
 */
function malformed(value: unknown): string | undefined {
  try {
    if (typeof value !== 'object' || value === null) return `resolved to ${value === null ? 'null' : typeof value} instead of an outcome`;
    const { status, messageId, consumer, retryAfterMs, error } = value as Record<string, unknown>;
    if (!STATUSES.has(status))
      return `resolved to an outcome with an unknown status (${typeof status === 'string' ? JSON.stringify(status.slice(0, 50)) : typeof status})`;
    if (typeof messageId !== 'string' || typeof consumer !== 'string') return `resolved to a ${String(status)} outcome without text messageId and consumer`;
    if ((status === 'retry' || status === 'busy') && (typeof retryAfterMs !== 'number' || !(retryAfterMs >= 0)))
      return `resolved to a ${status} outcome without a retryAfterMs >= 0`;
    if ((status === 'retry' || status === 'dead-letter' || status === 'conflict') && (typeof error !== 'object' || error === null))
      return `resolved to a ${status} outcome without an error`;
    return undefined;
  } catch (cause) {
    return `resolved to a value that cannot be read (${describeError(cause)})`;
  }
}

/**
 * Runs a processor on deliveries, with the one rule every adapter follows when it breaks its
 * contract: a processor that throws (a middleware's bug; inboxed's own never do), resolves to
 * something that is not an outcome, or (a batch processor) to the wrong number of outcomes, leaves
 * those deliveries `retry` with reason
 * `processor-threw` (`PROCESSOR_THREW`, not counted), never acked. The `error` event comes from
 * `emitOutcome` when the retry is settled, rate-limited like every infrastructure retry, so a
 * middleware that throws on every message raises one event per interval, not one per message.
 * Per-message processors run concurrently; a batch processor gets all messages at once.
 *
 * With OpenTelemetry (see `configureTelemetry`), each delivery gets a `process <destination>` span
 * (kind CONSUMER) continuing the producer's trace context from its headers, and a per-message
 * processor runs inside it, so core's transaction span nests under it. A batch processor runs
 * outside the delivery spans; its transaction spans link to them. `destination` names the queue or
 * topic of these deliveries when `events.messaging` has none for the whole consumer (Kafka: per topic).
 * `options` is the consumer's stop signal, or {@link ProcessOptions} (a signal and a batch call's heartbeat).
 */
export async function callProcessor(
  processor: AnyInboxProcessor,
  messages: readonly InboxMessage[],
  options: AbortSignal | ProcessOptions | undefined,
  events: ConsumerEventEmitter,
  destination?: string,
): Promise<InboxOutcome[]> {
  const telemetry = startDeliveries(messages, processor.consumer, events.messaging, destination);
  const outcomes = await runProcessor(processor, messages, options instanceof AbortSignal ? { signal: options } : options, events, telemetry);
  markDecided(outcomes, destination);
  return outcomes;
}

/** {@link callProcessor} itself: each call inside its delivery spans when telemetry is on. */
async function runProcessor(
  processor: AnyInboxProcessor,
  messages: readonly InboxMessage[],
  options: ProcessOptions | undefined,
  events: ConsumerEventEmitter,
  telemetry: DeliveryTelemetry | undefined,
): Promise<InboxOutcome[]> {
  const broken = (problem: string, cause?: unknown, about: readonly InboxMessage[] = messages) => {
    const error = new InboxError(InboxErrorCodes.PROCESSOR_THREW, `the processor ${problem} (it must resolve to one outcome per message)`, {
      ...(cause === undefined ? {} : { cause }),
      messageIds: about.map((m) => String(m.id)),
    });
    events.logger.warn({ err: error, code: error.code, messageIds: error.messageIds }, error.message);
    return error;
  };
  if (isBatchProcessor(processor)) {
    const call = async () => {
      try {
        const outcomes: unknown = await processor(messages, options);
        const miscounted =
          Array.isArray(outcomes) && outcomes.length === messages.length
            ? undefined
            : broken(`returned ${Array.isArray(outcomes) ? outcomes.length : 'no'} outcomes for ${messages.length} messages`);
        const given: unknown[] = Array.isArray(outcomes) ? outcomes : [];
        return messages.map((message, i) => {
          if (i >= given.length && miscounted !== undefined) return processorThrew(processor, message, miscounted);
          const problem = malformed(given[i]);
          return problem === undefined ? (given[i] as InboxOutcome) : processorThrew(processor, message, broken(problem, undefined, [message]));
        });
      } catch (cause) {
        const error = broken(`threw: ${describeError(cause)}`, cause);
        return messages.map((message) => processorThrew(processor, message, error));
      }
    };
    return telemetry === undefined ? call() : telemetry.batch(call);
  }
  return Promise.all(
    messages.map(async (message, i) => {
      const call = async () => {
        try {
          const outcome: unknown = await processor(message, options);
          const problem = malformed(outcome);
          return problem === undefined ? (outcome as InboxOutcome) : processorThrew(processor, message, broken(problem, undefined, [message]));
        } catch (cause) {
          return processorThrew(processor, message, broken(`threw: ${describeError(cause)}`, cause, [message]));
        }
      };
      return telemetry === undefined ? call() : telemetry.one(i, call);
    }),
  );
}
