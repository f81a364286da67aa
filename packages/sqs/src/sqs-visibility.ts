import type { InboxOutcome } from '@inboxed/core';
import { backoffDelay, type BackoffOptions, redeliverAfterMs } from '@inboxed/core/adapter';

/** SQS's ceiling for a visibility timeout, and for the total time one receive may stay invisible: 12 hours. */
export const MAX_VISIBILITY_TIMEOUT_SECONDS = 43_200;

/**
 * Caps a visibility timeout to what SQS accepts for a message received at `receivedAt`: a receive
 * can be kept invisible for at most 12 hours in total, so extensions near the end are shortened
 * rather than rejected.
 */
export function capVisibility(seconds: number, receivedAt: Date, now: number = Date.now()): number {
  const elapsed = Math.floor((now - receivedAt.getTime()) / 1000);
  const left = Math.max(0, MAX_VISIBILITY_TIMEOUT_SECONDS - elapsed);
  return Math.max(0, Math.min(Math.ceil(seconds), left, MAX_VISIBILITY_TIMEOUT_SECONDS));
}

/**
 * How long a message that will be redelivered stays invisible, in whole seconds. `busy` (another
 * worker holds its lease): the outcome's own `retryAfterMs` (what is left of that lease), at least
 * 1 s, never a backoff on the receive count (a busy receive is not a failure). `retry`: the outcome's
 * `retryAfterMs` when core computed one (from the larger of the durable attempt count and
 * `ApproximateReceiveCount`), else exponential backoff on `ApproximateReceiveCount`. Rounded up so a
 * sub-second delay is still a delay, and capped at 12 hours.
 */
export function retryVisibilitySeconds(outcome: InboxOutcome | undefined, receiveCount: number | undefined, backoff: BackoffOptions): number {
  if (outcome?.status === 'busy') return busyVisibilitySeconds(outcome.retryAfterMs);
  const ms = (outcome === undefined ? undefined : redeliverAfterMs(outcome)) ?? backoffDelay(Math.max(receiveCount ?? 1, outcome?.attempt ?? 1), backoff);
  return Math.min(MAX_VISIBILITY_TIMEOUT_SECONDS, Math.max(0, Math.ceil(ms / 1000)));
}

/**
 * A busy message's visibility: its `retryAfterMs` rounded up, at least 1 s (visibility 0 would hand
 * it straight back while the lease is still held), at most 12 hours. A missing or invalid value (a
 * hand-built outcome) is treated as 0, so 1 s.
 */
function busyVisibilitySeconds(retryAfterMs: number | undefined): number {
  const ms = typeof retryAfterMs === 'number' && Number.isFinite(retryAfterMs) ? retryAfterMs : 0;
  return Math.min(MAX_VISIBILITY_TIMEOUT_SECONDS, Math.max(1, Math.ceil(ms / 1000)));
}
