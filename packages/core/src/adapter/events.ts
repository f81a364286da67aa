import { EventEmitter } from 'node:events';
import type { Attributes } from '@opentelemetry/api';
import { describeError } from '../error-text.js';
import { InboxError } from '../errors.js';
import { messagingAttributes, recordSettled, registerInFlight } from '../telemetry/instruments.js';
import type { MessagingContext } from '../telemetry/messaging.js';
import {
  OutcomeReasons,
  type BusyOutcome,
  type ConflictOutcome,
  type DeadLetterOutcome,
  type DuplicateOutcome,
  type InboxOutcome,
  type ProcessedOutcome,
  type RejectedOutcome,
  type RetryOutcome,
} from '../types.js';
import { defaultLogger, type InboxLogger, safeLogger } from './logger.js';

/** How long a delivery took, on every outcome event. */
export interface DeliveryTiming {
  /** When the consumer received the delivery from the broker. */
  receivedAt: Date;
  /** When it was settled with the broker (acked, committed, deleted, or its retry/dead-letter copy confirmed). */
  settledAt: Date;
  /** `settledAt - receivedAt`, in ms. */
  durationMs: number;
}

/** Events every broker consumer emits, with the same names and payloads across adapters. */
export interface ConsumerEvents {
  /** A delivery's effect committed (`processed` or `rejected`) and the delivery was settled. */
  message_processed: [outcome: ProcessedOutcome | RejectedOutcome, timing: DeliveryTiming];
  /** A redelivery was settled without running the handler. */
  duplicate: [outcome: DuplicateOutcome, timing: DeliveryTiming];
  /** A delivery will be redelivered after `outcome.retryAfterMs`. */
  retry: [outcome: RetryOutcome, timing: DeliveryTiming];
  /**
   * Leased mode: another worker holds a live lease on the message; the delivery comes back after
   * `outcome.retryAfterMs` without counting an attempt.
   */
  busy: [outcome: BusyOutcome, timing: DeliveryTiming];
  /** A delivery was dead-lettered (`dead-letter` or `conflict`); `destination` says where. */
  dead_letter: [outcome: DeadLetterOutcome | ConflictOutcome, destination: string, timing: DeliveryTiming];
  /** Something went wrong outside a single message (connection, ack, publish). Never swallowed. */
  error: [error: InboxError];
  /** The consumer reconnected after losing its connection. */
  reconnect: [info: { attempt: number; delayMs: number }];
  /** `start()` finished: the consumer takes deliveries. */
  started: [];
  /** `stop()` finished: nothing is in flight any more (or `stopTimeoutMs` passed). */
  stopped: [];
}

/**
 * Retry reasons that are not the message's doing but the consumer's surroundings: the database is
 * away, the tables are missing, inbox statements are refused, conflicts persist, or inboxed failed.
 * Each message keeps being retried; the operator must hear about it, once, not once per message.
 */
const INFRASTRUCTURE_REASONS = new Set<string>([
  OutcomeReasons.DATABASE_UNAVAILABLE,
  OutcomeReasons.INBOX_TABLE_MISSING,
  OutcomeReasons.INBOX_QUERY_FAILED,
  OutcomeReasons.TRANSACTION_CONFLICT,
  OutcomeReasons.INTERNAL_ERROR,
  OutcomeReasons.PROCESSOR_THREW,
]);

/** When `callProcessor` decided each outcome, and for which destination: for the settle latency and attributes. */
const decided = new WeakMap<InboxOutcome, { at: number; destination: string | undefined }>();

/** @internal Notes the outcomes `callProcessor` returned as decided now. */
export function markDecided(outcomes: readonly InboxOutcome[], destination: string | undefined): void {
  // One entry shared by the whole call: a batch of hundreds decides at the same time.
  const decision = { at: Date.now(), destination };
  for (const outcome of outcomes) if (typeof outcome === 'object' && outcome !== null) decided.set(outcome, decision);
}

/** The shortest gap between two `error` events for the same infrastructure reason. */
export const INFRASTRUCTURE_ERROR_INTERVAL_MS = 30_000;

/**
 * A typed event emitter for {@link ConsumerEvents}, shared by every adapter. It also keeps what a
 * health probe reads from events: when a delivery last settled, and the last error.
 */
export class ConsumerEventEmitter {
  private readonly emitter = new EventEmitter();
  /** Per key of a recurring report: when it was last reported, and how many times it happened since. */
  private readonly recurring = new Map<string, { reportedAt: number; since: number }>();
  /** When a delivery last settled with the broker. */
  lastSettledAt: Date | undefined;
  /** The last `error` emitted. */
  lastError: { code: string; message: string; at: Date } | undefined;
  /** What the adapter told {@link instrument} about its deliveries (undefined: no messaging attributes on spans and metrics). */
  messaging: MessagingContext | undefined;
  /** The metric attributes of `messaging` per destination, built once rather than per settled delivery. */
  private attributesByDestination = new Map<string | undefined, Attributes>();
  /** The `messaging` those attributes were built from (the field is public: a new value drops them). */
  private attributesOf: MessagingContext | undefined;

  /** The consumer's logger, made unable to throw (see `safeLogger`). */
  readonly logger: InboxLogger;

  constructor(
    logger: InboxLogger = defaultLogger,
    private readonly now: () => number = Date.now,
  ) {
    this.logger = safeLogger(logger);
  }

  /**
   * Describes the adapter's deliveries for OpenTelemetry: the messaging system, destination and
   * consumer group on every span and metric of `callProcessor` and `emitOutcome`, where a delivery's
   * trace context travels, and (given `inFlight`) its size as `inboxed.deliveries.in_flight`. Call it
   * once the destination is known; calling it again replaces the description.
   */
  instrument(messaging: MessagingContext, inFlight?: { readonly size: number }): void {
    this.messaging = messaging;
    if (inFlight !== undefined) registerInFlight(inFlight, messagingAttributes(messaging));
  }

  /** Subscribes to an event. Returns a function that unsubscribes. */
  on<K extends keyof ConsumerEvents>(event: K, listener: (...args: ConsumerEvents[K]) => void): () => void {
    this.emitter.on(event, listener as (...args: unknown[]) => void);
    return () => this.emitter.off(event, listener as (...args: unknown[]) => void);
  }

  /**
   * Emits an event. An `error` with no listener goes to the logger (by default one stderr line)
   * rather than being thrown (that would crash the consumer loop) or dropped (errors are never
   * swallowed silently). Each listener is called on its own: one that throws, or an `async` one
   * whose promise rejects, is logged the same way, and the listeners after it are still called.
   * Nothing a listener does reaches the adapter (a rejection left unhandled would end the process).
   */
  emit<K extends keyof ConsumerEvents>(event: K, ...args: ConsumerEvents[K]): void {
    if (event === 'error') {
      const error = args[0] as InboxError;
      this.lastError = { code: String(error.code), message: error.message, at: new Date(this.now()) };
      if (this.emitter.listenerCount('error') === 0) {
        this.logger.error({ err: error, code: error.code }, 'consumer error (add an "error" listener to handle it)');
        return;
      }
    }
    for (const listener of this.emitter.listeners(event)) {
      try {
        const returned: unknown = listener(...args);
        if (typeof (returned as PromiseLike<unknown> | null)?.then === 'function') {
          (returned as PromiseLike<unknown>).then(undefined, (error: unknown) => this.listenerFailed(event, error));
        }
      } catch (error) {
        this.listenerFailed(event, error);
      }
    }
  }

  private listenerFailed(event: string, error: unknown): void {
    this.logger.error({ err: error, event }, `a "${event}" listener threw: ${describeError(error)}`);
  }

  /**
   * Emits the event that matches a settled outcome's status, with its timing, and records it
   * (`inboxed.outcomes`, the status counters, `inboxed.settle.duration`) when OpenTelemetry is on.
   */
  emitOutcome(outcome: InboxOutcome, receivedAt: Date, deadLetterDestination = 'dead-letter'): void {
    const settledAt = new Date(this.now());
    this.lastSettledAt = settledAt;
    const timing: DeliveryTiming = { receivedAt, settledAt, durationMs: settledAt.getTime() - receivedAt.getTime() };
    this.logger.debug({ messageId: outcome.messageId, status: outcome.status, reason: outcome.reason, durationMs: timing.durationMs }, 'settled');
    const decision = decided.get(outcome);
    recordSettled(outcome, this.attributesFor(decision?.destination), (settledAt.getTime() - (decision?.at ?? receivedAt.getTime())) / 1000);
    switch (outcome.status) {
      case 'processed':
      case 'rejected':
        this.emit('message_processed', outcome, timing);
        break;
      case 'duplicate':
        this.emit('duplicate', outcome, timing);
        break;
      case 'retry':
        this.emit('retry', outcome, timing);
        this.reportInfrastructure(outcome);
        break;
      case 'busy':
        this.emit('busy', outcome, timing);
        break;
      case 'dead-letter':
      case 'conflict':
        this.emit('dead_letter', outcome, deadLetterDestination, timing);
        break;
    }
  }

  /** The messaging attributes of a destination (Kafka: a topic), cached: their set is as small as the consumer's topics. */
  private attributesFor(destination: string | undefined): Attributes {
    if (this.attributesOf !== this.messaging) {
      this.attributesOf = this.messaging;
      this.attributesByDestination = new Map();
    }
    let attributes = this.attributesByDestination.get(destination);
    if (attributes === undefined) {
      attributes = messagingAttributes(this.messaging, destination);
      this.attributesByDestination.set(destination, attributes);
    }
    return attributes;
  }

  /**
   * Raises an `error` event for retries caused by the consumer's surroundings: the first one at
   * once, then at most one per {@link INFRASTRUCTURE_ERROR_INTERVAL_MS} per reason, carrying how many
   * retries happened for that reason since the last report (`details.retriesSinceLastReport`).
   */
  private reportInfrastructure(outcome: InboxOutcome): void {
    const reason = outcome.reason;
    if (reason === undefined || !INFRASTRUCTURE_REASONS.has(reason) || outcome.error === undefined) return;
    const due = this.occurrencesToReport(`retry:${reason}`);
    if (due === undefined) return;
    const retries = due.times;
    const { error } = outcome;
    this.emit(
      'error',
      new InboxError(error.code, `${retries} deliver${retries === 1 ? 'y' : 'ies'} retried (${reason}) since the last report; latest: ${error.message}`, {
        cause: error,
        messageIds: error.messageIds,
        details: { ...error.details, reason, retriesSinceLastReport: retries },
      }),
    );
  }

  /**
   * Raises an `error` event for something that keeps happening on its own (a session the broker
   * keeps closing, a copy that can never be encoded), paced like the infrastructure retries: the
   * first at once and as it is, then at most one per {@link INFRASTRUCTURE_ERROR_INTERVAL_MS} per
   * `key`, saying how many times it happened since the last report (`details.retriesSinceLastReport`).
   */
  reportRecurring(key: string, error: InboxError): void {
    const due = this.occurrencesToReport(`recurring:${key}`);
    if (due === undefined) return;
    if (due.first) {
      this.emit('error', error);
      return;
    }
    const { times } = due;
    this.emit(
      'error',
      new InboxError(error.code, `${times} time${times === 1 ? '' : 's'} since the last report; latest: ${error.message}`, {
        cause: error,
        messageIds: error.messageIds,
        details: { ...error.details, retriesSinceLastReport: times },
      }),
    );
  }

  /**
   * Counts one occurrence under `key`: when it is time to report, how many happened since the last
   * report (this one included) and whether this is the first ever; `undefined` while the interval
   * since the last report runs.
   */
  private occurrencesToReport(key: string): { times: number; first: boolean } | undefined {
    const now = this.now();
    const seen = this.recurring.get(key);
    if (seen !== undefined && now - seen.reportedAt < INFRASTRUCTURE_ERROR_INTERVAL_MS) {
      seen.since++;
      return undefined;
    }
    this.recurring.set(key, { reportedAt: now, since: 0 });
    return { times: (seen?.since ?? 0) + 1, first: seen === undefined };
  }
}
