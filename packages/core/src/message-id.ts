import { describeError, storableText } from './error-text.js';
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

/** Decodes bytes as UTF-8 and throws on a malformed sequence instead of replacing it with U+FFFD. */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The text of a message id as a broker hands it (a header, an attribute, a property), or
 * `undefined` when there is none. Exact or refused, never approximated: two different ids must never
 * become one, or the second message is acked as a duplicate of the first and its effect is lost. So
 * bytes must be well-formed UTF-8 (decoding would turn every malformed sequence into the same
 * U+FFFD), a number must be a safe integer (a 64-bit id above 2^53 has already lost its last digits
 * when the client decoded it), and anything else (a boolean, a list, a table) is not an id.
 * A refused value throws an `INVALID_MESSAGE_ID` {@link InboxError}: the adapter dead-letters the
 * delivery with reason `invalid-message-id`.
 */
export function messageIdText(value: unknown, where: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  if (typeof value === 'bigint') return value.toString();
  const refuse = (why: string) =>
    new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, `the message id in ${where} ${why}`, { details: { reason: OutcomeReasons.INVALID_MESSAGE_ID } });
  if (typeof value === 'number') {
    if (Number.isSafeInteger(value)) return String(value);
    throw refuse(`is the number ${value}, not a safe integer: a larger integer loses digits when it is decoded, so two ids would become one`);
  }
  if (value instanceof Uint8Array) {
    try {
      return strictUtf8.decode(value);
    } catch {
      throw refuse(`is ${value.byteLength} bytes that are not well-formed UTF-8`);
    }
  }
  throw refuse(`is ${Array.isArray(value) ? 'a list' : typeof value}, not text`);
}

/**
 * The id a user's `messageId.extract(delivery)` gives, read as {@link messageIdText} reads a header:
 * `undefined` when it gives none (the adapter goes on down its list), an `INVALID_MESSAGE_ID`
 * {@link InboxError} thrown when the extractor throws or gives something that is not an exact id.
 */
export function extractedMessageId<T>(extract: ((delivery: T) => unknown) | undefined, delivery: T): string | undefined {
  if (extract === undefined) return undefined;
  let extracted: unknown;
  try {
    extracted = extract(delivery);
  } catch (error) {
    throw new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, `options.messageId.extract threw: ${describeError(error)}`, { cause: error });
  }
  return messageIdText(extracted, 'options.messageId.extract()');
}
