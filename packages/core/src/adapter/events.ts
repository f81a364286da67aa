import { EventEmitter } from 'node:events';
import type { InboxError } from '../errors.js';
import type { InboxOutcome } from '../types.js';

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

/** A typed event emitter for {@link ConsumerEvents}. */
export class ConsumerEventEmitter {
  private readonly emitter = new EventEmitter();

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
        return this.emit('message_processed', outcome);
      case 'duplicate':
        return this.emit('duplicate', outcome);
      case 'retry':
        return this.emit('retry', outcome);
      case 'dead-letter':
      case 'conflict':
        return this.emit('dead_letter', outcome, deadLetterDestination);
    }
  }
}
