import { InboxError, InboxErrorCodes } from '../errors.js';
import type { AnyPgDatabase } from '../types.js';
import type { ClaimFence, LeaseStore } from './lease-store.js';

/** @internal The error a lost lease carries (the signal's reason, `renewLease()`'s rejection, the outcome's error). */
export function leaseLostError(messageId: string, token: number, why: string): InboxError {
  return new InboxError(InboxErrorCodes.LEASE_LOST, `the lease of fencing token ${token} on this message is lost: ${why}`, {
    messageIds: [messageId],
    details: { fencingToken: token },
  });
}

/**
 * @internal One claim's lease as this worker sees it. Its signal fires when the lease can no longer
 * be counted on: when `leaseMs` has passed since the claim (or the last renewal) was *sent*, which is
 * never later than the server's own expiry (the server computed it from a later `now()`), or when a
 * renewal is refused because the claim changed hands. The consumer's clock only ever measures
 * durations here, never points in time, so a clock hours off changes nothing.
 */
export class Lease {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private ended = false;

  constructor(
    private readonly leases: LeaseStore,
    private readonly db: AnyPgDatabase,
    private readonly messageId: string,
    /** The claim this lease is on: its token and instant, which every later write is fenced by. */
    readonly fence: ClaimFence,
    private readonly leaseMs: number,
    claimSentAt: number,
  ) {
    this.schedule(claimSentAt);
  }

  get token(): number {
    return this.fence.token;
  }

  /** Fires when the lease is lost; its reason is a `LEASE_LOST` {@link InboxError}. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get lost(): boolean {
    return this.controller.signal.aborted;
  }

  /**
   * Extends the lease to `leaseMs` from now (server time). Rejects with `LEASE_LOST` once the lease
   * is lost (the signal fired, or the claim changed hands meanwhile); a database error rejects as is
   * and leaves the lease running out on its own.
   */
  async renew(): Promise<void> {
    // A heartbeat left running after the attempt ended must not keep the claim alive for ever.
    if (this.ended) throw leaseLostError(this.messageId, this.token, 'the attempt is over: renewLease() was called after the handler returned');
    if (this.lost) throw this.controller.signal.reason;
    const sentAt = performance.now();
    const renewed = await this.leases.renew(this.db, this.messageId, this.fence, this.leaseMs);
    if (this.lost) throw this.controller.signal.reason;
    if (this.ended) return; // renewed while the attempt ended: the completion or release has the row now
    if (!renewed) {
      this.lose('another worker took the claim over, or it was completed or released');
      throw this.controller.signal.reason;
    }
    this.schedule(sentAt);
  }

  /** Stops watching: the attempt is over, and `renew()` refuses from now on. */
  dispose(): void {
    this.ended = true;
    clearTimeout(this.timer);
  }

  private lose(why: string): void {
    clearTimeout(this.timer);
    if (!this.lost) this.controller.abort(leaseLostError(this.messageId, this.token, why));
  }

  private schedule(sentAt: number): void {
    clearTimeout(this.timer);
    const left = Math.max(0, sentAt + this.leaseMs - performance.now());
    this.timer = setTimeout(() => this.lose(`leaseMs (${this.leaseMs} ms) passed without renewLease()`), left);
    this.timer.unref?.();
  }
}
