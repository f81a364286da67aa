import { InboxError } from '@inboxed/core';

/** Error codes of the CLI itself, next to core's `InboxErrorCodes` (same `InboxError` class). */
export const CliErrorCodes = {
  /** Bad arguments: an unknown command or option, a missing required one, a malformed value. */
  USAGE_ERROR: 'USAGE_ERROR',
  /** Neither `--database-url` nor the `DATABASE_URL` environment variable is set. */
  DATABASE_URL_MISSING: 'DATABASE_URL_MISSING',
  /** The database URL is not a `postgres://` or `postgresql://` URL. */
  DATABASE_URL_INVALID: 'DATABASE_URL_INVALID',
} as const;

/** A usage error (exit code 2) about one argument. */
export function usageError(message: string): InboxError {
  return new InboxError(CliErrorCodes.USAGE_ERROR, message);
}
