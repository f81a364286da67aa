import { backoffDelay, type BackoffOptions } from '@inboxed/core/adapter';

/** How long a session must have consumed before its loss counts as a fresh start (backoff from the base delay again). */
export const HEALTHY_SESSION_MS = 30_000;

/**
 * @internal Paces reconnects across sessions. A session the broker closes again right after it
 * opened (a copy to an exchange that does not exist closes the publish channel with a 404, every
 * time the same poison message comes back) must not be reopened at the base delay for ever: each
 * session that dies young continues the backoff where the last reconnect left it (growing, capped
 * at `maxDelayMs`); one that consumed for {@link HEALTHY_SESSION_MS} starts over from the base.
 */
export class ReconnectPacing {
  /** Consecutive sessions that were lost before they had lived {@link HEALTHY_SESSION_MS}. */
  private youngLosses = 0;

  constructor(
    private readonly backoff: BackoffOptions,
    private readonly healthyMs: number = HEALTHY_SESSION_MS,
  ) {}

  /** Notes that a session opened at `openedAt` (ms) was lost at `now`. */
  lost(openedAt: number, now: number = Date.now()): void {
    this.youngLosses = now - openedAt >= this.healthyMs ? 0 : this.youngLosses + 1;
  }

  /** The delay before reconnect attempt `attempt` (1, 2, ...) of the current loss. */
  delayMs(attempt: number): number {
    return backoffDelay(this.youngLosses + attempt, this.backoff);
  }
}
