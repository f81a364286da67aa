import { hash } from 'node:crypto';
import { canonicalJson } from './canonical-json.js';
import type { InboxMessage } from './types.js';

/**
 * How a payload is fingerprinted, so that a message id reused with a different payload is caught.
 *
 * - `'auto'` (default): raw bytes for binary payloads (`Buffer`, any typed array or `DataView`,
 *   `ArrayBuffer`), otherwise the JSON Canonicalization Scheme (RFC 8785) of the payload.
 * - `'json'`: always RFC 8785 JSON; binary has no JSON form there and is refused (except `Buffer`,
 *   whose `toJSON()` gives `{ type, data }`).
 * - `'bytes'`: the payload must be binary or a string (hashed as UTF-8).
 * - a function: returns the value to fingerprint, e.g. only the fields that define the business
 *   operation (`(m) => ({ amount: m.payload.amount, to: m.payload.to })`); its result is
 *   fingerprinted with `'auto'` rules.
 * - `false`: no fingerprint; a reused id is always a duplicate.
 *
 * Canonical JSON rules (RFC 8785; see `canonicalJson`): object keys are sorted by UTF-16 code
 * units, insignificant whitespace is dropped, numbers have one spelling (`1.0` and `1` are the same,
 * `1e3` is `1000`). A property whose value is `undefined` is the same as an absent property (JSON has
 * no `undefined`) and `undefined` in an array is `null`; `null` is a value and differs from absent.
 * `toJSON()` is honoured (a `Date` is its ISO string). Strings are hashed exactly as given, in UTF-8:
 * no Unicode normalisation, so NFC `"é"` and NFD `"é"` differ. Array order matters.
 *
 * Values with no JSON form of their own are refused with `FINGERPRINT_FAILED` rather than hashed
 * as something else: `Map`, `Set`, class instances without `toJSON`, typed arrays or `ArrayBuffer`
 * inside a JSON payload, `NaN`, `Infinity`, `BigInt`, functions, symbols, array holes, lone
 * surrogates and cycles. (Hashing a `Map` as `{}` would make every `Map` payload the same message.)
 */
export type FingerprintOption = 'auto' | 'json' | 'bytes' | false | ((message: InboxMessage) => unknown);

/** SHA-256 (hex) of the canonical form of a message's payload, or `null` when fingerprinting is off. */
export function fingerprintMessage(message: InboxMessage, option: FingerprintOption = 'auto'): string | null {
  if (option === false) return null;
  if (typeof option === 'function') return fingerprintValue(option(message), 'auto');
  return fingerprintValue(message.payload, option);
}

/** The bytes of a binary value (any typed array, `DataView`, `ArrayBuffer`), or `undefined`. */
function bytesOf(value: unknown): Uint8Array | undefined {
  if (value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && value instanceof SharedArrayBuffer)) return new Uint8Array(value);
  return undefined;
}

/**
 * SHA-256 (hex) of a value under `'auto'`, `'json'` or `'bytes'` rules. Throws on values with no JSON
 * form. One-shot `crypto.hash` (Node 20.12+): for payloads of a few hundred bytes it is several times
 * cheaper than a `createHash` object per message, and the digest is the same.
 */
export function fingerprintValue(value: unknown, mode: 'auto' | 'json' | 'bytes'): string {
  const bytes = mode === 'json' ? undefined : bytesOf(value);
  if (bytes !== undefined) return hash('sha256', bytes);
  if (mode === 'bytes') {
    if (typeof value !== 'string') throw new TypeError('fingerprint "bytes" needs a binary or string payload');
    return hash('sha256', value);
  }
  return hash('sha256', canonicalJson(value));
}
