import { EventEmitter } from 'node:events';
import { InboxError } from '../errors.js';
import { OutcomeReasons, type InboxOutcome } from '../types.js';

/** Events every broker consumer emits, with the same names and payloads across adapters. */
export interface ConsumerEvents {
  /** A delivery's effect committed (`processed` or `rejected`). */
  message_processed: [outcome: InboxOutcome];
  /** A redelivery was acked without running the handler. */
  duplicate: [outcome: InboxOutcome];
  /** A delivery will be redelivered after `outcome.retryAfterMs`. */
  retry: [outcome: InboxOutcome];
  /** A delivery was dead-lettered (`dead-letter` or `conflict`); `destination` says where. */
  dead_letter: [outcome: InboxOutcome, destination: string];
  /** Something went wrong outside a single message (connection, ack, publish). Never swallowed. */
  error: [error: InboxError];
  /** The consumer reconnected after losing its connection. */
  reconnect: [info: { attempt: number; delayMs: number }];
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
]);

/** The shortest gap between two `error` events for the same infrastructure reason. */
export const INFRASTRUCTURE_ERROR_INTERVAL_MS = 30_000;

/** A typed event emitter for {@link ConsumerEvents}. */
export class ConsumerEventEmitter {
  private readonly emitter = new EventEmitter();
  /** Per infrastructure reason: when it was last reported, and how many retries since. */
  private readonly infrastructure = new Map<string, { reportedAt: number; since: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Subscribes to an event. Returns a function that unsubscribes. */
  on<K extends keyof ConsumerEvents>(event: K, listener: (...args: ConsumerEvents[K]) => void): () => void {
    this.emitter.on(event, listener as (...args: unknown[]) => void);
    return () => this.emitter.off(event, listener as (...args: unknown[]) => void);
  }

  /**
   * Emits an event. An `error` with no listener is written to stderr rather than thrown (throwing
   * would crash the consumer loop) or dropped (errors are never swallowed silently). A listener
   * that throws is reported the same way instead of breaking the adapter.
   */
  emit<K extends keyof ConsumerEvents>(event: K, ...args: ConsumerEvents[K]): void {
    if (event === 'error' && this.emitter.listenerCount('error') === 0) {
      console.error('[inboxed] unhandled consumer error (add an "error" listener):', args[0]);
      return;
    }
    try {
      this.emitter.emit(event, ...args);
    } catch (error) {
      console.error(`[inboxed] a "${event}" listener threw:`, error);
    }
  }

  /** Emits the event that matches an outcome's status. */
  emitOutcome(outcome: InboxOutcome, deadLetterDestination = 'dead-letter'): void {
    switch (outcome.status) {
      case 'processed':
      case 'rejected':
        this.emit('message_processed', outcome);
        break;
      case 'duplicate':
        this.emit('duplicate', outcome);
        break;
      case 'retry':
        this.emit('retry', outcome);
        this.reportInfrastructure(outcome);
        break;
      case 'dead-letter':
      case 'conflict':
        this.emit('dead_letter', outcome, deadLetterDestination);
        break;
    }
  }

  /**
   * Raises an `error` event for retries caused by the consumer's surroundings: the first one at
   * once, then at most one per {@link INFRASTRUCTURE_ERROR_INTERVAL_MS} per reason, carrying how many
   * retries happened for that reason since the last report (`details.retriesSinceLastReport`).
   */
  private reportInfrastructure(outcome: InboxOutcome): void {
    const reason = outcome.reason;
    if (reason === undefined || !INFRASTRUCTURE_REASONS.has(reason) || outcome.error === undefined) return;
    const now = this.now();
    const seen = this.infrastructure.get(reason);
    if (seen !== undefined && now - seen.reportedAt < INFRASTRUCTURE_ERROR_INTERVAL_MS) {
      seen.since++;
      return;
    }
    const retries = (seen?.since ?? 0) + 1;
    this.infrastructure.set(reason, { reportedAt: now, since: 0 });
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
}
