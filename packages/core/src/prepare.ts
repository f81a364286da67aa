import { describeError, InboxError, InboxErrorCodes } from './errors.js';
import { fingerprintMessage } from './fingerprint.js';
import { checkMessageId, displayMessageId } from './message-id.js';
import type { ResolvedOptions } from './options.js';
import { OutcomeReasons, type AnyPgDatabase, type InboxMessage, type InboxOutcome } from './types.js';

/** @internal a delivery that passed every check that needs no database. */
export interface PreparedMessage<TPayload> {
  message: InboxMessage<TPayload>;
  fingerprint: string | null;
}

/**
 * @internal Checks what can be checked without the database: the id, the `parse` option and the
 * fingerprint. A failure here is the message's own fault and retrying cannot fix it, so it is a
 * `dead-letter` outcome straight away, and the database is never touched.
 */
export function prepareMessage<TPayload>(
  options: ResolvedOptions<AnyPgDatabase, TPayload>,
  message: InboxMessage,
): PreparedMessage<TPayload> | InboxOutcome {
  const deadLetter = (reason: string, error: InboxError): InboxOutcome => ({
    status: 'dead-letter',
    messageId: displayMessageId(message?.id),
    consumer: options.consumer,
    reason,
    error,
    attempt: message?.attempt ?? 1,
  });
  if (message === null || typeof message !== 'object') {
    return deadLetter(OutcomeReasons.MISSING_MESSAGE_ID, new InboxError(InboxErrorCodes.INVALID_MESSAGE_ID, 'message is not an object'));
  }
  const idProblem = checkMessageId(message.id);
  if (idProblem !== undefined) return deadLetter(idProblem.reason, idProblem.error);

  let fingerprint: string | null;
  try {
    fingerprint = fingerprintMessage(message, options.fingerprint);
  } catch (error) {
    return deadLetter(
      OutcomeReasons.UNFINGERPRINTABLE_PAYLOAD,
      new InboxError(InboxErrorCodes.FINGERPRINT_FAILED, `payload cannot be fingerprinted: ${describeError(error)}`, { cause: error, messageIds: [message.id] }),
    );
  }

  if (options.parse === undefined) return { message: message as InboxMessage<TPayload>, fingerprint };
  try {
    return { message: { ...message, payload: options.parse(message.payload, message) }, fingerprint };
  } catch (error) {
    return deadLetter(
      OutcomeReasons.VALIDATION_FAILED,
      new InboxError(InboxErrorCodes.VALIDATION_FAILED, `payload failed validation: ${describeError(error)}`, { cause: error, messageIds: [message.id] }),
    );
  }
}

/** @internal True when {@link prepareMessage} already produced a final outcome. */
export function isOutcome<TPayload>(value: PreparedMessage<TPayload> | InboxOutcome): value is InboxOutcome {
  return 'status' in value;
}

/** @internal The outcome of an id that was already in the inbox: a duplicate, or a conflict when the payload differs. */
export function outcomeOfExisting(
  options: ResolvedOptions<AnyPgDatabase, unknown>,
  message: InboxMessage,
  fingerprint: string | null,
  existing: { fingerprint: string | null; status: string; reason: string | null },
): InboxOutcome {
  const base = { messageId: message.id, consumer: options.consumer, attempt: message.attempt ?? 1 };
  const mismatch = fingerprint !== null && existing.fingerprint !== null && fingerprint !== existing.fingerprint;
  if (!mismatch) {
    return existing.status === 'rejected' && existing.reason !== null
      ? { ...base, status: 'duplicate', reason: existing.reason }
      : { ...base, status: 'duplicate' };
  }
  const error = new InboxError(
    InboxErrorCodes.PAYLOAD_MISMATCH,
    `message id ${JSON.stringify(message.id)} was already processed by ${JSON.stringify(options.consumer)} with a different payload`,
    { messageIds: [message.id], details: { consumer: options.consumer, storedFingerprint: existing.fingerprint, fingerprint } },
  );
  return { ...base, status: options.onPayloadMismatch === 'duplicate' ? 'duplicate' : 'conflict', reason: OutcomeReasons.PAYLOAD_MISMATCH, error };
}
