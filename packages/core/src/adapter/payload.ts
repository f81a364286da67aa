import { describeError, InboxError } from '../errors.js';

/** Adapter error code: a body that claims to be JSON and is not. */
export const UNPARSEABLE_BODY = 'UNPARSEABLE_BODY';
/** Outcome reason for {@link UNPARSEABLE_BODY}. */
export const UNPARSEABLE_BODY_REASON = 'unparseable-body';

/** How a consumer decodes bodies: `'json'`, `'content-type'` (JSON when the content type says so, else bytes) or `'raw'` bytes. */
export type PayloadMode = 'json' | 'content-type' | 'raw';

/** A decoded body, or why it could not be decoded. */
export type DecodedPayload = { ok: true; payload: unknown } | { ok: false; error: InboxError };

const JSON_CONTENT_TYPE = /^application\/(?:[\w.+-]+\+)?json\b/i;

/** True when a content type announces JSON (`application/json`, `application/cloudevents+json; charset=utf-8`). */
export function isJsonContentType(contentType: string | undefined): boolean {
  return contentType !== undefined && JSON_CONTENT_TYPE.test(contentType.trim());
}

/**
 * Decodes a message body the same way in every adapter. `mode`:
 * - `'json'`: the body must be JSON (SQS bodies, Kafka values by default);
 * - `'content-type'`: JSON when `contentType` says so, raw `Buffer` otherwise (AMQP);
 * - `'raw'`: always the raw `Buffer`.
 * An unparseable JSON body is an `UNPARSEABLE_BODY` error, to be dead-lettered with reason
 * `unparseable-body`: retrying cannot make it parse.
 */
export function decodePayload(body: Buffer | string | null | undefined, mode: PayloadMode, contentType?: string): DecodedPayload {
  const buffer = body === null || body === undefined ? Buffer.alloc(0) : typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  if (mode === 'raw' || (mode === 'content-type' && !isJsonContentType(contentType))) return { ok: true, payload: buffer };
  try {
    return { ok: true, payload: JSON.parse(buffer.toString('utf8')) };
  } catch (error) {
    return {
      ok: false,
      error: new InboxError(UNPARSEABLE_BODY, `body is not valid JSON: ${describeError(error)}`, {
        cause: error,
        details: { bytes: buffer.length, preview: buffer.subarray(0, 64).toString('utf8') },
      }),
    };
  }
}
