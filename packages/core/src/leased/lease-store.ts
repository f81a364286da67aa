import { sql } from 'drizzle-orm';
import { storableText } from '../error-text.js';
import type { AttemptRecord, ClaimRow, InboxStore } from '../inbox-store.js';
import { InboxErrorCodes } from '../errors.js';
import { rowsOf } from '../query-rows.js';
import { Attr, recordClaim } from '../telemetry/instruments.js';
import { startInternalSpan } from '../telemetry/spans.js';
import type { AnyPgDatabase } from '../types.js';

type Executable = Pick<AnyPgDatabase, 'execute'>;

/** The error a takeover records for the attempt whose lease ran out (see the claim). */
const UNFINISHED_LEASE_TEXT = 'the lease of an earlier attempt ran out before it ended: its worker died or stalled';

/**
 * The `reason` a claim writes on the row it takes over from an expired lease (a claim that was given
 * back gets null). Written by `ON CONFLICT DO UPDATE`, which sees the row as it is once its lock is
 * granted, and read back by RETURNING: the statement's snapshot (its `prior` CTE) may still show a
 * lease that a release committed while the claim waited for the lock, and counting from it counted
 * a failed attempt twice (once by its worker, once as "died"). Only an open claim carries it;
 * completing the claim overwrites it.
 */
const TAKEN_OVER = 'lease-expired';

/**
 * The claim's own instant (`completed_at` of an open claim, set by each claim), as exact ISO text in
 * UTC whatever the session's DateStyle and TimeZone. Every later write is fenced by it as well as by
 * the token: a retention purge can delete an abandoned claim, and the next claim of the same id
 * starts again at token 1, which alone would let a worker that stalled past both the lease and the
 * retention window complete over the new owner.
 */
const CLAIMED_AT = `to_char(completed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** A claim as its holder knows it: every write after the claim must match both. */
export interface ClaimFence {
  token: number;
  /** {@link CLAIMED_AT} of the claim. */
  claimedAt: string;
}

/** What the leased claim found, as one row of its statement. */
interface ClaimRowResult {
  /** The token of the claim this statement made; null when it made none. */
  token: number | null;
  /** The claim's instant ({@link CLAIMED_AT}); null when it made none. */
  claimed_at: string | null;
  /** Whether the claim took over an expired lease, as the row was once locked; null when it made none. */
  took_over: boolean | null;
  /** The row as it was before the statement (null: there was none). */
  prior_status: string | null;
  prior_fingerprint: string | null;
  prior_reason: string | null;
  prior_result: string | null;
  /** ms left on the prior lease by the server's clock (0 when expired), null when the prior row had none. */
  prior_lease_ms: number | null;
  /** Failed attempts counted for the message so far (null: none). */
  prior_attempts: number | null;
}

/** The answer of {@link LeaseStore.claim}. */
export type LeaseClaim =
  /**
   * This worker holds the message now, under `token`; `takeover` when an expired lease was taken;
   * `attempts`, the failed attempts already counted for it.
   */
  | { kind: 'claimed'; token: number; claimedAt: string; takeover: boolean; attempts: number }
  /** The message is completed (or known with another payload): decide as for any existing row. */
  | { kind: 'existing'; status: string; fingerprint: string | null; reason: string | null; result: string | null }
  /** Another worker holds a live lease, or won a claim race this very moment. */
  | { kind: 'busy'; remainingMs: number };

/**
 * @internal The statements of leased mode. Each is one autocommit statement (its own short
 * transaction), so a claim is committed before the handler runs and no row lock is held across the
 * handler's external call. Lease times are the server's (`now()`), never the consumer's clock.
 * A claim is a `processing` row: `lease_expires_at` set while it is owned, null once released.
 * Every write after the claim is fenced by `fencing_token`: a worker whose claim was taken over (a
 * higher token) can neither renew, release nor complete it.
 */
export class LeaseStore {
  constructor(
    private readonly store: InboxStore,
    private readonly consumer: string,
  ) {}

  /**
   * Claims a message in one statement: inserts a `processing` row with token 1, or takes over a
   * `processing` row whose lease expired or was released (token + 1). A completed row, a live lease
   * or (with `strictFingerprint`) another payload leave the row alone; the statement then reports
   * the row as it found it. `ON CONFLICT DO UPDATE ... WHERE` re-checks the condition on the latest
   * row version after waiting for a concurrent claimer, so two workers can never both take it.
   */
  async claim(db: Executable, row: ClaimRow, leaseMs: number, strictFingerprint: boolean, lockTimeoutMs: number | null = null): Promise<LeaseClaim> {
    // Observed like the transactional claim: an `inboxed lease claim` span and `inboxed.claim.duration`.
    const span = startInternalSpan('inboxed lease claim', { [Attr.CONSUMER]: this.consumer }, [row.messageId]);
    const started = performance.now();
    let claim: LeaseClaim | undefined;
    try {
      claim =
        span === undefined
          ? await this.claimOnce(db, row, leaseMs, strictFingerprint, lockTimeoutMs)
          : await span.run(() => this.claimOnce(db, row, leaseMs, strictFingerprint, lockTimeoutMs));
      return claim;
    } finally {
      const result = claim === undefined ? 'failed' : claim.kind === 'existing' ? 'known' : claim.kind;
      recordClaim(this.consumer, (performance.now() - started) / 1000, result);
      span?.end(
        {
          [Attr.CLAIM_RESULT]: result,
          ...(claim?.kind === 'claimed' ? { [Attr.FENCING_TOKEN]: claim.token, [Attr.TAKEOVER]: claim.takeover } : {}),
        },
        claim === undefined ? { type: 'failed', message: 'the leased claim failed' } : undefined,
      );
    }
  }

  private async claimOnce(db: Executable, row: ClaimRow, leaseMs: number, strictFingerprint: boolean, lockTimeoutMs: number | null): Promise<LeaseClaim> {
    const inbox = this.store.inboxTable;
    const lease = sql`now() + make_interval(secs => ${leaseMs}::float8 / 1000)`;
    // The claim can wait on the row's lock: another worker's completion transaction (its complete()
    // writes) or a transactional copy of the same consumer. Its consumer value sets lock_timeout
    // first, as the transactional claim does; the statement is its own transaction, so the setting
    // ends with it. A timeout is a retry (`in-progress`), not counted.
    const consumer =
      lockTimeoutMs === null
        ? sql`${this.consumer}`
        : sql`(case when set_config('lock_timeout', ${sql.raw(`'${lockTimeoutMs}'`)}, true) is null then null else ${this.consumer}::text end)`;
    const [found] = await rowsOf<ClaimRowResult>(
      db,
      sql`with prior as (
          select status, fingerprint, reason, result,
                 case when lease_expires_at is null then null
                      else greatest(0, ceil(extract(epoch from (lease_expires_at - now())) * 1000))::float8 end as lease_ms
          from ${inbox} where consumer = ${this.consumer} and message_id = ${row.messageId}
        ), claim as (
          insert into ${inbox} as i (consumer, message_id, fingerprint, status, source, received_at, lease_expires_at, fencing_token, completed_at)
          values (${consumer}, ${row.messageId}, ${row.fingerprint}, 'processing', ${row.source ?? null},
                  coalesce(${row.receivedAt?.toISOString() ?? null}::timestamptz, now()), ${lease}, 1, now())
          on conflict (consumer, message_id) do update
            set fencing_token = i.fencing_token + 1, lease_expires_at = excluded.lease_expires_at, completed_at = now(),
                reason = case when i.lease_expires_at is null then null else ${TAKEN_OVER} end
            where i.status = 'processing' and (i.lease_expires_at is null or i.lease_expires_at <= now())
              and (not ${strictFingerprint}::boolean or i.fingerprint is null or excluded.fingerprint is null or i.fingerprint = excluded.fingerprint)
          returning fencing_token, coalesce(reason = ${TAKEN_OVER}, false) as took_over, ${sql.raw(CLAIMED_AT)} as claimed_at
        ), died as (
          -- A takeover: the lease of the attempt before ran out before it ended. Its worker died
          -- (a kill, out of memory) or stalled, and never counted it: counted here, once.
          insert into ${this.store.attemptsTable} as a (consumer, message_id, attempts, last_error, last_error_code)
          select ${this.consumer}, ${row.messageId}, 1, ${UNFINISHED_LEASE_TEXT}, ${InboxErrorCodes.ATTEMPT_UNFINISHED}
          where exists (select 1 from claim where took_over)
          on conflict (consumer, message_id) do update set attempts = a.attempts + 1, last_attempt_at = now()
          returning attempts
        )
        select (select fencing_token from claim) as token, (select claimed_at from claim) as claimed_at,
               (select took_over from claim) as took_over, p.status as prior_status, p.fingerprint as prior_fingerprint,
               p.reason as prior_reason, p.result as prior_result, p.lease_ms as prior_lease_ms,
               coalesce((select attempts from died),
                        (select a.attempts from ${this.store.attemptsTable} a where a.consumer = ${this.consumer} and a.message_id = ${row.messageId})) as prior_attempts
        from (select 1) as one left join prior p on true`,
    );
    if (found === undefined) throw new Error('the leased claim returned no row');
    if (found.token !== null) {
      // A takeover is a claim of a row whose lease ran out; a released row (null lease) was given
      // back by a worker that knew how its attempt ended.
      return {
        kind: 'claimed',
        token: Number(found.token),
        claimedAt: String(found.claimed_at),
        takeover: found.took_over === true,
        attempts: found.prior_attempts === null ? 0 : Number(found.prior_attempts),
      };
    }
    if (found.prior_status !== null && found.prior_status !== 'processing') {
      return { kind: 'existing', status: found.prior_status, fingerprint: found.prior_fingerprint, reason: found.prior_reason, result: found.prior_result };
    }
    if (found.prior_status === 'processing' && strictFingerprint && isMismatch(found.prior_fingerprint, row.fingerprint)) {
      return { kind: 'existing', status: 'processing', fingerprint: found.prior_fingerprint, reason: null, result: null };
    }
    // A live lease, or a concurrent claimer that got there between this statement's snapshot and its
    // insert (the snapshot then shows no row, or an expired one): either way, someone owns it now.
    const remaining = found.prior_lease_ms === null ? 0 : Number(found.prior_lease_ms);
    return { kind: 'busy', remainingMs: remaining };
  }

  /** Extends a claim's lease to `now() + leaseMs`. False when the claim is no longer this token's. */
  async renew(db: Executable, messageId: string, fence: ClaimFence, leaseMs: number): Promise<boolean> {
    const rows = await rowsOf<unknown>(
      db,
      sql`update ${this.store.inboxTable} set lease_expires_at = now() + make_interval(secs => ${leaseMs}::float8 / 1000)
        where consumer = ${this.consumer} and message_id = ${messageId} and ${fenced(fence)}
          and status = 'processing' and lease_expires_at is not null
        returning 1`,
    );
    return rows.length === 1;
  }

  /**
   * Gives a claim back after a failed attempt, so the next delivery claims it at once (with a higher
   * token) instead of waiting out the lease. False when the claim was no longer this token's.
   */
  async release(db: Executable, messageId: string, fence: ClaimFence): Promise<boolean> {
    const rows = await rowsOf<unknown>(
      db,
      sql`update ${this.store.inboxTable} set lease_expires_at = null, completed_at = now()
        where consumer = ${this.consumer} and message_id = ${messageId} and ${fenced(fence)} and status = 'processing'
        returning 1`,
    );
    return rows.length === 1;
  }

  /**
   * Gives a failed attempt's claim back and counts the attempt, in one statement: both or neither.
   * Undefined (nothing done) when the claim was no longer this worker's. Two statements left a
   * window: a claim taken between them read the count before this attempt's, ran the handler once
   * past `maxAttempts`, and a failure between them was never counted at all. `counted`: the attempt
   * was counted already (its error is recorded, the count left as it is).
   */
  async releaseCounting(
    db: Executable,
    messageId: string,
    fence: ClaimFence,
    error: { message: string; code: string },
    counted: boolean,
  ): Promise<AttemptRecord | undefined> {
    const attempts = this.store.attemptsTable;
    const [row] = await rowsOf<{ released: boolean; attempts: number | null; first_ms: number | null; last_ms: number | null }>(
      db,
      sql`with released as (
          update ${this.store.inboxTable} set lease_expires_at = null, completed_at = now()
          where consumer = ${this.consumer} and message_id = ${messageId} and ${fenced(fence)} and status = 'processing'
          returning 1
        ), counted as (
          insert into ${attempts} as a (consumer, message_id, attempts, last_error, last_error_code)
          select ${this.consumer}, ${messageId}, 1, ${storableText(error.message, 4000)}, ${storableText(error.code, 100)}
          where exists (select 1 from released)
          on conflict (consumer, message_id) do update
            set attempts = a.attempts + ${counted ? 0 : 1}, last_attempt_at = now(), last_error = excluded.last_error, last_error_code = excluded.last_error_code
          returning attempts, first_attempt_at, last_attempt_at
        )
        select exists (select 1 from released) as released, c.attempts,
               (extract(epoch from c.first_attempt_at) * 1000)::float8 as first_ms, (extract(epoch from c.last_attempt_at) * 1000)::float8 as last_ms
        from (select 1) as one left join counted c on true`,
    );
    if (row?.released !== true || row.attempts === null) return undefined;
    return { attempts: Number(row.attempts), firstAttemptAt: new Date(Number(row.first_ms)), lastAttemptAt: new Date(Number(row.last_ms)) };
  }

  /**
   * Completes a claim inside the completion transaction: `processed` (with the stored result) or
   * `rejected` (with its reason), only while the row is still this token's open claim. False when the
   * fence refused it: the claim was taken over (or released), and nothing may be written.
   */
  async complete(
    tx: Executable,
    messageId: string,
    fence: ClaimFence,
    completion: { status: 'processed' | 'rejected'; reason: string | null; result: string | null },
  ): Promise<boolean> {
    const rows = await rowsOf<unknown>(
      tx,
      sql`update ${this.store.inboxTable}
        set status = ${completion.status}, reason = ${completion.reason}, result = ${completion.result},
            lease_expires_at = null, completed_at = clock_timestamp()
        where consumer = ${this.consumer} and message_id = ${messageId} and ${fenced(fence)} and status = 'processing'
        returning 1`,
    );
    return rows.length === 1;
  }
}

/** The fence of every write after the claim: this token, and this claim's own instant. */
function fenced(fence: ClaimFence) {
  return sql`fencing_token = ${fence.token} and completed_at = ${fence.claimedAt}::timestamptz`;
}

function isMismatch(stored: string | null, incoming: string | null): boolean {
  return stored !== null && incoming !== null && stored !== incoming;
}
