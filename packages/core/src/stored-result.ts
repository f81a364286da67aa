import { describeError } from './error-text.js';
import { InboxError, InboxErrorCodes } from './errors.js';

/** The largest stored result, as JSON text: results live in the inbox row, next to every id. */
export const MAX_RESULT_BYTES = 64 * 1024;

/** A handler's result to record with the completion; see {@link storeResult}. */
export interface StoredResult {
  readonly kind: 'inboxed.result';
  /** The value as JSON text, checked and bounded when it was made. */
  readonly json: string;
}

/**
 * Return `storeResult(value)` from a handler to record a small JSON result with the message's
 * completion. The outcome carries it as `result`, and so does every later `duplicate` of the same
 * id: a redelivery gets the answer the first run computed (a charge id, a created order's number)
 * without running the handler again. Works in both modes.
 *
 * Throws `INVALID_RESULT` at once (a handler failure, counted) for a value with no JSON form
 * (`undefined`, a function, a BigInt, a cycle) or over 64 KiB as JSON. A plain return value is never
 * stored: `async (m, tx) => tx.insert(...)` returns a query result, not something to replay.
 */
export function storeResult(value: unknown): StoredResult {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw new InboxError(InboxErrorCodes.INVALID_RESULT, `storeResult: the value has no JSON form: ${describeError(error)}`, { cause: error });
  }
  if (typeof json !== 'string') throw new InboxError(InboxErrorCodes.INVALID_RESULT, `storeResult: ${typeof value} has no JSON form`);
  // JSON.stringify escapes NUL and lone surrogates, so the text is always storable in a text column.
  if (Buffer.byteLength(json) > MAX_RESULT_BYTES) {
    throw new InboxError(InboxErrorCodes.INVALID_RESULT, `storeResult: ${Buffer.byteLength(json)} bytes of JSON, over the ${MAX_RESULT_BYTES}-byte limit`);
  }
  return { kind: 'inboxed.result', json };
}

/** True when a handler's return value is a {@link StoredResult}. */
export function isStoredResult(value: unknown): value is StoredResult {
  return typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === 'inboxed.result';
}

/** @internal A stored result read back from the inbox row; `undefined` when none (or unreadable, e.g. edited by hand). */
export function parseStoredResult(json: string | null | undefined): unknown {
  if (json === null || json === undefined) return undefined;
  try {
    return JSON.parse(json);
  } catch {
    return undefined;
  }
}
