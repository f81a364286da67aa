import { InboxError, InboxErrorCodes } from './errors.js';

// Plain, unquoted-safe identifiers only: table and schema names end up in DDL and in Drizzle's
// quoted identifiers, and a name that needs quoting is almost always a typo or an injection.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Returns `name` when it is a plain SQL identifier (letters, digits, `_`, at most 63 bytes); throws `INVALID_IDENTIFIER` otherwise. */
export function assertIdentifier(name: string, what: string): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new InboxError(
      InboxErrorCodes.INVALID_IDENTIFIER,
      `${what} must be a plain SQL identifier (letters, digits and _, not starting with a digit, at most 63 characters); got ${JSON.stringify(name)}`,
      { details: { what, name } },
    );
  }
  return name;
}
