import { storableText } from './error-text.js';
import { InboxError, InboxErrorCodes } from './errors.js';
import { OutcomeReasons, type OutcomeReason } from './types.js';
import { isWellFormed } from './unicode.js';

/** The longest message id accepted, in UTF-8 bytes. Longer ids are almost always bodies or bugs. */
export const MAX_MESSAGE_ID_BYTES = 512;

/**
 * Why an id was refused, or `undefined` when it is acceptable: a non-blank string of at most 512
 * bytes of UTF-8, without NUL and without lone surrogates, so PostgreSQL stores exactly that id.
 */
export function checkMessageId(id: unknown): { reason: OutcomeReason; error: InboxError } | undefined {
  const fail = (reason: OutcomeReason, message: string) => ({
    reason,
    error: new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, message, { details: { reason } }),
  });
  if (id === undefined || id === null) return fail(OutcomeReasons.MISSING_MESSAGE_ID, 'message has no id');
  if (typeof id !== 'string') return fail(OutcomeReasons.INVALID_MESSAGE_ID, `message id must be a string, got ${typeof id}`);
  if (id.length === 0 || id.trim().length === 0) return fail(OutcomeReasons.MISSING_MESSAGE_ID, 'message id is empty');
  const bytes = Buffer.byteLength(id, 'utf8');
  if (bytes > MAX_MESSAGE_ID_BYTES) {
    return fail(OutcomeReasons.INVALID_MESSAGE_ID, `message id is ${bytes} bytes; the limit is ${MAX_MESSAGE_ID_BYTES}`);
  }
  if (id.includes('\u0000')) return fail(OutcomeReasons.INVALID_MESSAGE_ID, 'message id contains a NUL character, which PostgreSQL text cannot store');
  // PostgreSQL would store a lone surrogate as U+FFFD: a different id than the one delivered.
  if (!isWellFormed(id)) return fail(OutcomeReasons.INVALID_MESSAGE_ID, 'message id is not well-formed UTF-16 (it has a lone surrogate)');
  return undefined;
}

/**
 * A printable form of any id value, for outcomes of messages whose id was refused: at most 64
 * characters, and storable (NUL and lone surrogates become U+FFFD) so headers can carry it.
 */
export function displayMessageId(id: unknown): string {
  let text: string;
  try {
    text = id === undefined || id === null ? '' : String(id);
  } catch {
    return '';
  }
  return text.length > 64 ? `${storableText(text, 64)}…` : storableText(text);
}
