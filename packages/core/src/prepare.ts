import { parseStoredResult } from './stored-result.js';
import { describeError, storableText } from './error-text.js';
import { InboxError, InboxErrorCodes } from './errors.js';
import { fingerprintMessage } from './fingerprint.js';
import { checkMessageId, displayMessageId } from './message-id.js';
import { isStorableText, type ResolvedOptions } from './options.js';
import type { StandardSchemaV1 } from './standard-schema.js';
import { OutcomeReasons, type AnyPgDatabase, type InboxMessage, type InboxOutcome } from './types.js';

/** @internal a delivery that passed every check that needs no database. */
export interface PreparedMessage<TPayload> {
  message: InboxMessage<TPayload>;
  fingerprint: string | null;
}

/** The longest `source` accepted, in UTF-8 bytes (queue and topic names are far shorter). */
const MAX_SOURCE_BYTES = 1024;
/** `receivedAt` is stored as timestamptz; years outside 1..9999 are bugs (and ISO strings change shape). */
const EARLIEST = Date.parse('0001-01-01T00:00:00.000Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');

/** `attempt` when it is a positive integer that fits PostgreSQL's `integer`. */
function validAttempt(attempt: unknown): number | undefined {
  return typeof attempt === 'number' && Number.isInteger(attempt) && attempt >= 1 && attempt <= 2_147_483_647 ? attempt : undefined;
}

/** Why the delivery's fields other than the id cannot be stored as given, or `undefined`. */
function deliveryProblem(message: InboxMessage): string | undefined {
  const { source, receivedAt, attempt } = message;
  if (source !== undefined && (typeof source !== 'string' || !isStorableText(source) || Buffer.byteLength(source) > MAX_SOURCE_BYTES)) {
    return `source must be a string of at most ${MAX_SOURCE_BYTES} bytes without NUL or lone surrogates`;
  }
  if (receivedAt !== undefined) {
    const time = receivedAt instanceof Date ? receivedAt.getTime() : Number.NaN;
    if (!(time >= EARLIEST && time <= LATEST)) return 'receivedAt must be a valid Date between the years 1 and 9999';
  }
  if (attempt !== undefined && validAttempt(attempt) === undefined) return 'attempt must be a positive integer';
  return undefined;
}

/**
 * @internal Checks what can be checked without the database: the id, the other fields, the
 * fingerprint and the `parse` option. A failure here is the message's own fault and retrying cannot
 * fix it, so it is a `dead-letter` outcome straight away, and the database is never touched. User
 * callbacks (`fingerprint`, `parse`) that throw or reject end here too; they never escape.
 */
export async function prepareMessage<TPayload>(
  options: ResolvedOptions<AnyPgDatabase, TPayload>,
  delivery: InboxMessage,
): Promise<PreparedMessage<TPayload> | InboxOutcome> {
  const deadLetter = (messageId: string, reason: string, error: InboxError): InboxOutcome => ({
    status: 'dead-letter',
    messageId,
    consumer: options.consumer,
    reason,
    error,
    attempt: 1,
  });
  if (delivery === null || typeof delivery !== 'object') {
    return deadLetter('', OutcomeReasons.MISSING_MESSAGE_ID, new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, 'message is not an object'));
  }
  // Read every field once: a getter that throws (or answers differently each time) cannot reach the
  // database or the handler, which both see this plain copy.
  let message: InboxMessage;
  try {
    const { id, payload, headers, attempt, receivedAt, source, redelivered } = delivery;
    // Absent fields stay absent; added one by one, not deleted afterwards: `delete` would turn every
    // message into a slow dictionary-mode object for the rest of its way.
    message = { id, payload };
    if (headers !== undefined) message.headers = headers;
    if (attempt !== undefined) message.attempt = attempt;
    if (receivedAt !== undefined) message.receivedAt = receivedAt;
    if (source !== undefined) message.source = source;
    if (redelivered === true) message.redelivered = true;
  } catch (error) {
    return deadLetter(
      '',
      OutcomeReasons.INVALID_MESSAGE,
      new InboxError(InboxErrorCodes.INVALID_MESSAGE, `the message's fields cannot be read: ${describeError(error)}`, { cause: error }),
    );
  }
  const idProblem = checkMessageId(message.id);
  if (idProblem !== undefined) return deadLetter(displayMessageId(message.id), idProblem.reason, idProblem.error);
  const { id } = message;
  const dead = (reason: string, error: InboxError): InboxOutcome => ({ ...deadLetter(id, reason, error), attempt: validAttempt(message.attempt) ?? 1 });

  const problem = deliveryProblem(message);
  if (problem !== undefined) {
    return dead(
      OutcomeReasons.INVALID_MESSAGE,
      new InboxError(InboxErrorCodes.INVALID_MESSAGE, `message ${JSON.stringify(id)}: ${problem}`, { messageIds: [id] }),
    );
  }

  let fingerprint: string | null;
  try {
    fingerprint = fingerprintMessage(message, options.fingerprint);
  } catch (error) {
    return dead(
      OutcomeReasons.UNFINGERPRINTABLE_PAYLOAD,
      new InboxError(InboxErrorCodes.FINGERPRINT_FAILED, `payload cannot be fingerprinted: ${describeError(error)}`, { cause: error, messageIds: [id] }),
    );
  }

  const invalidPayload = (text: string, cause?: unknown, issues?: ValidationIssue[]) =>
    dead(
      OutcomeReasons.VALIDATION_FAILED,
      new InboxError(InboxErrorCodes.VALIDATION_FAILED, `payload failed validation: ${text}`, {
        cause,
        messageIds: [id],
        ...(issues === undefined ? {} : { details: { issues } }),
      }),
    );
  if (options.schema !== undefined) {
    const schema = options.schema;
    let checked: { issues: ValidationIssue[] } | { value: TPayload };
    try {
      checked = validationOf(await settledWithin(options.handlerTimeoutMs, () => schema['~standard'].validate(message.payload)));
    } catch (error) {
      return invalidPayload(describeError(error), error);
    }
    if ('issues' in checked) {
      const { issues } = checked;
      return invalidPayload(
        issues
          .slice(0, 5)
          .map((i) => (i.path === '' ? i.message : `${i.path}: ${i.message}`))
          .join('; ') || 'invalid',
        undefined,
        issues,
      );
    }
    return { message: { ...message, payload: checked.value }, fingerprint };
  }
  const { parse } = options;
  if (parse === undefined) return { message: message as InboxMessage<TPayload>, fingerprint };
  try {
    return { message: { ...message, payload: await settledWithin(options.handlerTimeoutMs, () => parse(message.payload)) }, fingerprint };
  } catch (error) {
    return invalidPayload(describeError(error), error);
  }
}

/**
 * `work`'s result, or a rejection once `timeoutMs` passed without one (null: no bound). Validation
 * runs before the transaction, outside the handler's deadline: a validator or `parse` that never
 * settles would otherwise hold its delivery (and an AMQP prefetch slot, a Kafka partition, an SQS
 * visibility extension) for ever, uncounted. A timeout dead-letters the message as a validation failure.
 */
async function settledWithin<T>(timeoutMs: number | null, work: () => T | PromiseLike<T>): Promise<T> {
  if (timeoutMs === null) return await work();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`it did not settle within handlerTimeoutMs (${timeoutMs} ms)`)), timeoutMs);
  });
  try {
    return await Promise.race([Promise.resolve().then(work), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A Standard Schema result, read once and checked: `{ value }` or `{ issues }` as the specification
 * says. Anything else (a validator that forgot to return, `issues` that is not an array, a getter
 * that throws) throws here, and is a validation failure like a validator that throws, rather than
 * an internal error retried for ever.
 */
function validationOf<T>(result: unknown): { issues: ValidationIssue[] } | { value: T } {
  if (typeof result !== 'object' || result === null)
    throw new Error(`the schema's validate() returned ${result === null ? 'null' : typeof result}, not a result`);
  const { issues, value } = result as { issues?: unknown; value?: unknown };
  if (issues === undefined) return { value: value as T };
  if (!Array.isArray(issues)) throw new Error("the schema's validate() returned issues that are not an array");
  return { issues: describeIssues(issues) };
}

/** One validation issue as reported on the outcome: where (`items.0.qty`, or '' for the root) and what. */
export interface ValidationIssue {
  path: string;
  message: string;
}

/** Standard Schema issues as storable, bounded text (at most 20 of them). */
function describeIssues(issues: readonly unknown[]): ValidationIssue[] {
  return issues.slice(0, 20).map((issue) => {
    try {
      const { path, message } = issue as StandardSchemaV1.Issue;
      return {
        path: (Array.isArray(path) ? path : []).map((segment) => String(typeof segment === 'object' && segment !== null ? segment.key : segment)).join('.'),
        message: storableText(String(message), 300),
      };
    } catch {
      return { path: '', message: 'an issue that cannot be read' };
    }
  });
}

/**
 * @internal The message as the handler gets it: a copy of inboxed's own, made for each call. inboxed
 * reads the id again after the handler (to count a failure, mark a rejection, claim a split batch's
 * half and label its outcomes); a handler that rewrote `message.id` in place (normalising it, say)
 * would otherwise have a split claim and commit the same message again under the new id. The
 * payload is shared, not copied: it is never read again to decide anything.
 */
export function handlerCopy<TPayload>(message: InboxMessage<TPayload>): InboxMessage<TPayload> {
  return { ...message };
}

/** @internal True when {@link prepareMessage} already produced a final outcome. */
export function isOutcome<TPayload>(value: PreparedMessage<TPayload> | InboxOutcome): value is InboxOutcome {
  return 'status' in value;
}

/** What decides a redelivery's outcome: the stored row of its id (or the row a batch just wrote). */
export interface KnownRow {
  fingerprint: string | null;
  status: string;
  reason: string | null;
  /** The stored result as JSON text. */
  result?: string | null;
  /** A leased claim's remaining lease in ms (0 once expired), null when released; absent for completed rows. */
  leaseRemainingMs?: number | null;
}

/** @internal The outcome of an id that was already in the inbox: a duplicate, or a conflict when the payload differs. */
export function outcomeOfExisting(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  message: InboxMessage,
  fingerprint: string | null,
  existing: KnownRow,
): InboxOutcome {
  const base = { messageId: message.id, consumer: options.consumer, attempt: message.attempt ?? 1 };
  const mismatch = fingerprint !== null && existing.fingerprint !== null && fingerprint !== existing.fingerprint;
  // An open leased claim is not a completion: a copy of it is busy (or in the wrong mode), never a
  // duplicate; another payload under its id is a conflict all the same.
  if (existing.status === 'processing' && !(mismatch && options.onPayloadMismatch === 'conflict')) return outcomeOfLeasedClaim(options, message, existing);
  const result = parseStoredResult(existing.result);
  if (!mismatch) {
    const stored = result === undefined ? base : { ...base, result };
    return existing.status === 'rejected' && existing.reason !== null
      ? { ...stored, status: 'duplicate', reason: existing.reason }
      : { ...stored, status: 'duplicate' };
  }
  const error = new InboxError(
    InboxErrorCodes.PAYLOAD_MISMATCH,
    `message id ${JSON.stringify(message.id)} was already processed by ${JSON.stringify(options.consumer)} with a different payload`,
    { messageIds: [message.id], details: { consumer: options.consumer, storedFingerprint: existing.fingerprint, fingerprint } },
  );
  return { ...base, status: options.onPayloadMismatch === 'duplicate' ? 'duplicate' : 'conflict', reason: OutcomeReasons.PAYLOAD_MISMATCH, error };
}

/**
 * A transactional processor met a leased-mode claim on the id (the same consumer name used in both
 * modes). While the lease is live the message is `busy`; a claim with no live owner cannot be taken
 * over from a transaction that would hold its row lock across the handler, so it is dead-lettered
 * with `mode-mismatch` rather than retried forever.
 */
function outcomeOfLeasedClaim(options: ResolvedOptions<AnyPgDatabase, unknown>, message: InboxMessage, existing: KnownRow): InboxOutcome {
  const base = { messageId: message.id, consumer: options.consumer, attempt: message.attempt ?? 1 };
  const remaining = existing.leaseRemainingMs ?? 0;
  if (remaining > 0) {
    const error = new InboxError(
      InboxErrorCodes.LEASE_HELD,
      `message id ${JSON.stringify(message.id)} is leased by another worker of ${JSON.stringify(options.consumer)}`,
      {
        messageIds: [message.id],
      },
    );
    return { ...base, status: 'busy', reason: OutcomeReasons.LEASE_HELD, error, retryAfterMs: boundedBusyDelay(remaining, 60_000) };
  }
  const error = new InboxError(
    InboxErrorCodes.MODE_MISMATCH,
    `message id ${JSON.stringify(message.id)} has an open leased-mode claim of ${JSON.stringify(options.consumer)}; a transactional processor cannot take it over. Use one mode per consumer name.`,
    { messageIds: [message.id], details: { consumer: options.consumer } },
  );
  return { ...base, status: 'dead-letter', reason: OutcomeReasons.MODE_MISMATCH, error };
}

/** @internal A `busy` outcome's delay: the lease's remaining time, at least 100 ms, at most `maxMs`. */
export function boundedBusyDelay(remainingMs: number, maxMs: number): number {
  return Math.min(Math.max(Math.ceil(remainingMs), 100), Math.max(maxMs, 100));
}
