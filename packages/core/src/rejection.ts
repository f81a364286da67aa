import { storableText } from './error-text.js';
import type { Rejection } from './types.js';

/** The longest rejection reason stored; reasons are codes ("insufficient-funds"), not essays. */
const MAX_REASON = 500;

/**
 * @internal The reason of a handler's `reject(reason)` as it will be stored and reported: a string
 * (other values are stringified), never blank, storable (NUL and lone surrogates become U+FFFD) and
 * bounded, so a sloppy reason cannot turn a business rejection into an endless retry.
 */
export function rejectionReason(rejection: Rejection): string {
  const raw: unknown = rejection.reason;
  const reason = typeof raw === 'string' ? raw : textOf(raw);
  return storableText(reason.trim() === '' ? 'rejected' : reason, MAX_REASON);
}

/**
 * `String(value)`, which throws for some values (`Object.create(null)`, a `toString` that throws):
 * the rejection is still the handler's decision, so it is recorded with a placeholder reason rather
 * than turned into a failure.
 */
function textOf(value: unknown): string {
  try {
    return String(value);
  } catch {
    return 'rejected (the reason has no text form)';
  }
}
