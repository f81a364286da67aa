import { describe, expect, it } from 'vitest';
import { CLAIM_LOST_MARKER, InboxStatementError } from './inbox-store.js';
import { bodyFailure, completionFailure } from './transaction-failures.js';

/** A driver error as PostgreSQL reports it, wrapped the way Drizzle wraps it (its message quotes the SQL). */
function wrapped(code: string, message: string) {
  const driverError = Object.assign(new Error(message), { code });
  return Object.assign(new Error(`Failed query: select ... '${CLAIM_LOST_MARKER} ' ...\nparams: `), { query: 'select ...', params: [], cause: driverError });
}

describe('whose failure is it, after the handler ran', () => {
  it('the completion check is "ended" only when its own marker cast failed, not when Drizzle quotes the marker in the SQL of another failure', () => {
    expect(completionFailure(wrapped('22P02', `invalid input syntax for type integer: "${CLAIM_LOST_MARKER} 0/1"`)).kind).toBe('ended');
    expect(completionFailure(wrapped('40001', 'could not serialize access')).kind).toBe('conflict');
    expect(completionFailure(wrapped('42501', 'permission denied for table inbox')).kind).toBe('handler');
  });

  it("a statement timeout or a read-only refusal after the handler is the handler's doing (its SET LOCAL), a lost connection is an outage", () => {
    expect(completionFailure(wrapped('57014', 'canceling statement due to statement timeout')).kind).toBe('handler');
    expect(completionFailure(wrapped('57P01', 'terminating connection due to administrator command')).kind).toBe('outage');
    expect(completionFailure(wrapped('57014', 'canceling statement due to user request')).kind).toBe('outage'); // pg_cancel_backend()
    // A server with translated messages (lc_messages = de_DE): the timeout is still counted, never an uncounted loop.
    expect(completionFailure(wrapped('57014', 'storniere Anfrage wegen Zeitüberschreitung der Anfrage')).kind).toBe('handler');
    expect(completionFailure(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })).kind).toBe('outage');
    const readOnly = wrapped('25006', 'cannot execute UPDATE in a read-only transaction');
    expect(bodyFailure(new InboxStatementError('result', readOnly)).kind).toBe('handler');
    expect(bodyFailure(new InboxStatementError('reject', readOnly)).kind).toBe('handler');
    // Before the handler (the lookup of a known row), the same codes are still the infrastructure's.
    expect(bodyFailure(new InboxStatementError('find', wrapped('57P01', 'terminating connection'))).kind).toBe('outage');
    expect(bodyFailure(new InboxStatementError('result', wrapped('57P01', 'terminating connection'))).kind).toBe('outage');
  });
});
