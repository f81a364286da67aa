import { describeError, InboxError } from '@inboxed/core';

/**
 * Error codes raised by `@inboxed/sqs`, next to core's `InboxErrorCodes`.
 * They reach you through the consumer's `error` event (or `errors` of `processSqsMessages`); none of
 * them loses a message: each says what SQS will do with it instead.
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
  /** The queue's attributes could not be read (wrong URL, permissions, network): `start()` rejects with it. */
  QUEUE_UNAVAILABLE: 'SQS_QUEUE_UNAVAILABLE',
  /** Neither `deadLetterQueueUrl` nor a redrive policy: dead-lettered messages are redelivered with backoff forever. */
  NO_DEAD_LETTER_TARGET: 'SQS_NO_DEAD_LETTER_TARGET',
  /** `stop()` reached `stopTimeoutMs` with work still running; it still settles if the process lives on, else those messages reappear after their visibility timeout. */
  STOP_TIMEOUT: 'SQS_STOP_TIMEOUT',
} as const;

/** One of {@link SqsErrorCodes}. */
export type SqsErrorCode = (typeof SqsErrorCodes)[keyof typeof SqsErrorCodes];

/** A failed entry of an SQS batch call (`DeleteMessageBatch`, `ChangeMessageVisibilityBatch`). */
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
export function awsErrorDetails(error: unknown): Record<string, unknown> {
  if (typeof error !== 'object' || error === null) return {};
  const e = error as AwsErrorShape;
  return {
    awsError: e.name,
    httpStatus: e.$metadata?.httpStatusCode,
    fault: e.$fault,
    requestId: e.$metadata?.requestId,
  };
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
  return new InboxError(code, text, {
    cause,
    messageIds: context.messageIds ?? [],
    details: { ...awsErrorDetails(cause), ...context.details },
  });
}

/** True when retrying the same SQS entry cannot succeed (the receipt handle is gone or invalid). */
export function isPermanentEntryFailure(failure: { code: string; senderFault: boolean }): boolean {
  return failure.senderFault && /ReceiptHandleIsInvalid|InvalidParameterValue|MessageNotInflight/i.test(failure.code);
}
