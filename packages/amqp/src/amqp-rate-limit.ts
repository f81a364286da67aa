import { InboxError } from '@inboxed/core';
import { type ConsumerEventEmitter, INFRASTRUCTURE_ERROR_INTERVAL_MS } from '@inboxed/core/adapter';

/**
 * @internal Reports a recurring error through `emit` the way the core reports infrastructure
 * retries: the first at once, then at most one per {@link INFRASTRUCTURE_ERROR_INTERVAL_MS} per key,
 * counting the occurrences since the last report (`details.retriesSinceLastReport`). For what
 * repeats on its own (a session the broker keeps closing, a copy that can never be encoded): the
 * operator must hear of it, without one event per repetition.
 *
 * (The core's own limiter is private to `ConsumerEventEmitter` and keyed by outcome reasons; this
 * mirrors it, with the same interval and detail name, for errors that are not outcomes.)
 */
export class RateLimitedErrors {
  /** Per key: when it was last reported, and how many times it happened since. */
  private readonly seen = new Map<string, { reportedAt: number; since: number }>();

  constructor(
    private readonly emit: (error: InboxError) => void,
    private readonly intervalMs: number = INFRASTRUCTURE_ERROR_INTERVAL_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Emits `error` unless `key` was reported less than the interval ago (then it is counted for the next report). */
  report(key: string, error: InboxError): void {
    const now = this.now();
    const seen = this.seen.get(key);
    if (seen !== undefined && now - seen.reportedAt < this.intervalMs) {
      seen.since++;
      return;
    }
    const times = (seen?.since ?? 0) + 1;
    this.seen.set(key, { reportedAt: now, since: 0 });
    if (seen === undefined) {
      this.emit(error);
      return;
    }
    this.emit(
      new InboxError(error.code, `${times} time${times === 1 ? '' : 's'} since the last report; latest: ${error.message}`, {
        cause: error,
        messageIds: error.messageIds,
        details: { ...error.details, retriesSinceLastReport: times },
      }),
    );
  }
}

/** One limiter per event emitter: a consumer's sessions come and go, its reports' pace must not restart with each. */
const limiters = new WeakMap<ConsumerEventEmitter, RateLimitedErrors>();

/** @internal The rate-limited `error` reporting of a consumer (or handler), by its event emitter. */
export function rateLimitedErrorsOf(events: ConsumerEventEmitter): RateLimitedErrors {
  let limiter = limiters.get(events);
  if (limiter === undefined) {
    limiter = new RateLimitedErrors((error) => events.emit('error', error));
    limiters.set(events, limiter);
  }
  return limiter;
}
