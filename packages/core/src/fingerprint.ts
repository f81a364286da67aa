import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import type { InboxMessage } from './types.js';

/**
 * How a payload is fingerprinted, so that a message id reused with a different payload is caught.
 *
 * - `'auto'` (default): raw bytes for `Uint8Array`/`Buffer` payloads, otherwise the JSON
 *   Canonicalization Scheme (RFC 8785) of the payload.
 * - `'json'`: always RFC 8785 JSON (a `Uint8Array` would be serialised as an object of indices).
 * - `'bytes'`: the payload must be bytes or a string (hashed as UTF-8).
 * - a function: returns the value to fingerprint, e.g. only the fields that define the business
 *   operation (`(m) => ({ amount: m.payload.amount, to: m.payload.to })`); its result is
 *   fingerprinted with `'auto'` rules.
 * - `false`: no fingerprint; a reused id is always a duplicate.
 *
 * Canonical JSON rules (RFC 8785 via the `canonicalize` package): object keys are sorted by UTF-16
 * code units, insignificant whitespace is dropped, numbers have one spelling (`1.0` and `1` are the
 * same, `1e3` is `1000`). A property whose value is `undefined` is the same as an absent property
 * (JSON has no `undefined`); `null` is a value and differs from absent. Strings are hashed exactly as
 * given, in UTF-8: no Unicode normalisation, so NFC `"é"` and NFD `"é"` differ. Array order matters.
 */
export type FingerprintOption = 'auto' | 'json' | 'bytes' | false | ((message: InboxMessage) => unknown);

/** SHA-256 (hex) of the canonical form of a message's payload, or `null` when fingerprinting is off. */
export function fingerprintMessage(message: InboxMessage, option: FingerprintOption = 'auto'): string | null {
  if (option === false) return null;
  if (typeof option === 'function') return fingerprintValue(option(message), 'auto');
  return fingerprintValue(message.payload, option);
}

/** SHA-256 (hex) of a value under `'auto'`, `'json'` or `'bytes'` rules. Throws on values JSON cannot express. */
export function fingerprintValue(value: unknown, mode: 'auto' | 'json' | 'bytes'): string {
  const hash = createHash('sha256');
  if (mode !== 'json' && value instanceof Uint8Array) {
    hash.update(value);
  } else if (mode === 'bytes') {
    if (typeof value !== 'string') throw new TypeError('fingerprint "bytes" needs a Uint8Array or string payload');
    hash.update(value, 'utf8');
  } else {
    const canonical = canonicalize(value);
    if (canonical === undefined) throw new TypeError('payload has no JSON representation (undefined or a function)');
    hash.update(canonical, 'utf8');
  }
  return hash.digest('hex');
}
