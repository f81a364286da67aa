import { InboxError, InboxErrorCodes } from './errors.js';
import { rejectionReason } from './rejection.js';
import { isStoredResult, MAX_RESULT_BYTES } from './stored-result.js';
import { isRejection } from './types.js';

/** @internal What a handler's return value asks the completion to record. */
export type Completion = { status: 'rejected'; reason: string; result: null } | { status: 'processed'; reason: null; result: string | null };

/**
 * @internal The completion a handler's return value asks for: `reject(reason)`, `storeResult(value)`
 * or anything else (processed, nothing stored). Call it where a throw counts as the handler's
 * failure: a returned value whose getters throw, or a look-alike of a stored result whose JSON is not
 * text, fails the attempt instead of inboxed.
 */
export function completionOf(returned: unknown): Completion {
  if (isRejection(returned)) return { status: 'rejected', reason: rejectionReason(returned), result: null };
  if (!isStoredResult(returned)) return { status: 'processed', reason: null, result: null };
  const { json } = returned;
  if (!isStorableJson(json)) {
    throw new InboxError(InboxErrorCodes.INVALID_RESULT, 'the handler returned a stored result that storeResult() did not make: return storeResult(value)');
  }
  return { status: 'processed', reason: null, result: json };
}

/**
 * What `storeResult()` makes: JSON text within the size limit. A look-alike (`{ kind:
 * 'inboxed.result', json }` built by hand) is checked again, or a raw NUL in it would make the
 * inbox's update fail on every delivery, and an oversized one would skip the limit.
 */
function isStorableJson(json: unknown): json is string {
  if (typeof json !== 'string' || Buffer.byteLength(json) > MAX_RESULT_BYTES) return false;
  try {
    JSON.parse(json);
    return true;
  } catch {
    return false;
  }
}
