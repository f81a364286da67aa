import { InboxErrorCodes } from '@inboxed/core';
import { CliErrorCodes } from './cli-errors.js';

/** The exit codes of `inboxed`: stable, documented in the README, one per kind of outcome. */
export const ExitCodes = {
  /** Done. */
  OK: 0,
  /** `migrate --check`: migrations are pending, or tables managed outside inboxed (no history) lack part of the latest version. */
  CHECK_FAILED: 1,
  /** Bad arguments: unknown command or option, missing `--reason`, a malformed duration, no database URL. */
  USAGE: 2,
  /** The database URL is malformed, or the database cannot be reached (down, wrong host, credentials, database name). */
  DATABASE: 3,
  /** The inbox tables are missing or not migrated to the latest version: run `inboxed migrate`. */
  TABLES_MISSING: 4,
  /** Unknown consumer or message, or a repair refused (completed message, nothing to release or requeue). Nothing was changed. */
  REFUSED: 5,
  /** Anything else: a statement failed (permissions, a changed table), a migration failed, a bug. */
  FAILED: 6,
} as const;

/** An exit code of {@link ExitCodes}. */
export type ExitCode = (typeof ExitCodes)[keyof typeof ExitCodes];

const BY_ERROR_CODE: Record<string, ExitCode> = {
  [CliErrorCodes.USAGE_ERROR]: ExitCodes.USAGE,
  [CliErrorCodes.DATABASE_URL_MISSING]: ExitCodes.USAGE,
  [InboxErrorCodes.INVALID_OPTIONS]: ExitCodes.USAGE,
  [InboxErrorCodes.INVALID_IDENTIFIER]: ExitCodes.USAGE,
  [CliErrorCodes.DATABASE_URL_INVALID]: ExitCodes.DATABASE,
  [InboxErrorCodes.DATABASE_UNAVAILABLE]: ExitCodes.DATABASE,
  [InboxErrorCodes.UNSUPPORTED_DATABASE]: ExitCodes.DATABASE,
  [InboxErrorCodes.INBOX_TABLE_MISSING]: ExitCodes.TABLES_MISSING,
  [InboxErrorCodes.UNKNOWN_CONSUMER]: ExitCodes.REFUSED,
  [InboxErrorCodes.MESSAGE_NOT_FOUND]: ExitCodes.REFUSED,
  [InboxErrorCodes.ALREADY_COMPLETED]: ExitCodes.REFUSED,
  [InboxErrorCodes.NOTHING_TO_RELEASE]: ExitCodes.REFUSED,
  [InboxErrorCodes.NOTHING_TO_REQUEUE]: ExitCodes.REFUSED,
};

/** The exit code for an error code; {@link ExitCodes.FAILED} for any code not listed. */
export function exitCodeFor(code: string): ExitCode {
  return BY_ERROR_CODE[code] ?? ExitCodes.FAILED;
}
