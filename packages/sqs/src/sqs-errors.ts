import type { BatchResultErrorEntry } from '@aws-sdk/client-sqs';
import { describeError, InboxError, InboxErrorCodes } from '@inboxed/core';

/**
 * Error codes raised by `@inboxed/sqs`, next to core's `InboxErrorCodes` (`STOP_TIMEOUT`,
 * `PROCESSOR_THREW`, `INBOX_TABLE_MISSING`, ...). They reach you through the `error` event (or
 * `errors` of {@link SqsHandler.handle}); none of them loses a message: each says what SQS does
 * with it instead.
 */
export const SqsErrorCodes = {
  /** `ReceiveMessage` failed; the poller backs off and tries again (then emits `reconnect`). */
  RECEIVE_FAILED: 'SQS_RECEIVE_FAILED',
  /** A delete failed after its retries. The message reappears after its visibility timeout and is then acked as a `duplicate`. */
  DELETE_FAILED: 'SQS_DELETE_FAILED',
  /** A `ChangeMessageVisibility` for a retry failed. The message reappears when its current visibility timeout lapses instead. */
  VISIBILITY_CHANGE_FAILED: 'SQS_VISIBILITY_CHANGE_FAILED',
  /** A heartbeat could not extend a running message's visibility; another consumer may receive a copy (the inbox still makes it a `duplicate`). */
  HEARTBEAT_FAILED: 'SQS_HEARTBEAT_FAILED',
  /** Sending to the dead-letter queue failed; the message is not deleted and comes back after a backoff. */
  DEAD_LETTER_FAILED: 'SQS_DEAD_LETTER_FAILED',
  /**
   * Processing or settling received messages, or a turn of a poller, threw where nothing should (a
   * bug in a middleware, a hook or inboxed; not an SQS failure). A message it left unsettled is not
   * deleted: it is redelivered after a backoff, or reappears after its visibility timeout. The other
   * messages of the receive are settled by their own outcomes; the poller goes on after a backoff.
   */
  SETTLE_FAILED: 'SQS_SETTLE_FAILED',
  /** The queue's attributes could not be read (wrong URL, permissions, network): `start()` rejects with it. */
  QUEUE_UNAVAILABLE: 'SQS_QUEUE_UNAVAILABLE',
  /** Neither `deadLetterQueueUrl` nor a redrive policy: dead-lettered messages are redelivered with backoff until they expire. */
  NO_DEAD_LETTER_TARGET: 'SQS_NO_DEAD_LETTER_TARGET',
  /**
   * Reported by `start()`, which goes on: the queue's redrive policy has a `maxReceiveCount` below 10
   * (or twice the processor's `maxAttempts`), so SQS may move a message to its DLQ, with no inboxed
   * reason or record, before inboxed has decided anything (every receive counts, uncounted retries too).
   */
  REDRIVE_RECEIVE_COUNT_LOW: 'SQS_REDRIVE_RECEIVE_COUNT_LOW',
} as const;

/** One of {@link SqsErrorCodes}. */
export type SqsErrorCode = (typeof SqsErrorCodes)[keyof typeof SqsErrorCodes];

/** A failed entry of an SQS batch call (`DeleteMessageBatch`, `ChangeMessageVisibilityBatch`), as put in error `details.failures`. */
export interface SqsBatchFailure {
  messageId: string;
  code: string;
  message: string;
  senderFault: boolean;
}

interface AwsErrorShape {
  name?: string;
  message?: string;
  $fault?: 'client' | 'server';
  $metadata?: { httpStatusCode?: number; requestId?: string };
}

/** The AWS facts worth logging about a thrown SDK error (name, HTTP status, fault side, request id). */
function awsErrorDetails(error: unknown): Record<string, unknown> {
  if (typeof error !== 'object' || error === null) return {};
  const e = error as AwsErrorShape;
  return { awsError: e.name, httpStatus: e.$metadata?.httpStatusCode, fault: e.$fault, requestId: e.$metadata?.requestId };
}

/**
 * The one place SQS failures become inboxed errors: `code` says what failed, the AWS error stays
 * the `cause`, and the message ids it concerns are attached so logs can be joined with the inbox.
 */
export function toSqsError(
  code: SqsErrorCode,
  what: string,
  cause: unknown,
  context: { messageIds?: readonly string[]; details?: Record<string, unknown> } = {},
): InboxError {
  const text = cause === undefined ? what : `${what}: ${describeError(cause)}`;
  return new InboxError(code, text, { cause, messageIds: context.messageIds ?? [], details: { ...awsErrorDetails(cause), ...context.details } });
}

/** An invalid option: thrown at construction (or by `start()` when it needs the queue's attributes to tell). */
export function invalidOption(message: string): never {
  throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, message);
}

/** A failed batch entry, from the call's `Failed` list or from the error the whole call threw. */
export function batchFailure(messageId: string, failed: BatchResultErrorEntry | undefined, thrown?: unknown): SqsBatchFailure {
  if (failed !== undefined) return { messageId, code: failed.Code ?? 'Unknown', message: failed.Message ?? '', senderFault: failed.SenderFault ?? false };
  const error = thrown as AwsErrorShape | undefined;
  return { messageId, code: error?.name ?? 'Error', message: error?.message ?? String(thrown), senderFault: error?.$fault === 'client' };
}

/** True when retrying the same SQS entry cannot succeed (the receipt handle is gone or invalid). */
export function isPermanentEntryFailure(failure: { code: string; senderFault: boolean }): boolean {
  return failure.senderFault && /ReceiptHandleIsInvalid|InvalidParameterValue|MessageNotInflight/i.test(failure.code);
}

/** True for an SDK error SQS blamed on the request (too large, invalid attribute), which resending unchanged cannot fix. */
export function isClientFault(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as AwsErrorShape).$fault === 'client';
}

/** True for an error the AWS SDK raised (it carries `$metadata`), as opposed to one thrown by our own code. */
export function isSdkError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && '$metadata' in error;
}

/** `failures` as one line for an error message. */
export function describeFailures(failures: readonly SqsBatchFailure[]): string {
  return failures.map((f) => `${f.code}: ${f.message}`).join('; ');
}
