import { refuseUnsupportedClient } from './drivers/postgres-js.js';
import { sql, type SQL } from 'drizzle-orm';
import { defaultLogger, type InboxLogger, safeLogger } from './adapter/logger.js';
import { classifyDatabaseError } from './database-errors.js';
import { describeError, sqlStateOf } from './error-text.js';
import { InboxError, InboxErrorCodes, isInboxError } from './errors.js';
import { rowsIn } from './query-rows.js';
import { qualifiedName } from './qualified-name.js';
import { deleteBatch, planPurge, purgeStatements, runBatches, type PurgeOptions, type PurgePlan } from './retention.js';
import { recordRetentionRun } from './telemetry/instruments.js';
import type { AnyPgDatabase } from './types.js';

/** Options of {@link startInboxRetention}: a purge's options, and when and how it runs. */
export interface InboxRetentionOptions extends Omit<PurgeOptions, 'maxBatches'> {
  /** How often a run starts, in ms (each start is moved by up to `jitter` of it, so instances spread out). */
  everyMs: number;
  /** Fraction of `everyMs` each run is moved by at random (0 to 1). The first run starts after a random part of it. @defaultValue 0.1 */
  jitter?: number;
  /** Stop a run after this many batches per table; the next run goes on. @defaultValue no limit */
  maxBatchesPerRun?: number;
  /** `statement_timeout` of each delete, in ms, so no statement runs unbounded. @defaultValue 30000 */
  statementTimeoutMs?: number;
  /** Called after every run, also when it stood down for another instance. Must not throw (a throw is logged). */
  onRun?: (run: RetentionRun) => void;
  /** Called when a run failed (the database was away, a statement timed out). The next run still happens. @defaultValue log it */
  onError?: (error: InboxError) => void;
  /** Where runs and failures are logged (pino-compatible). @defaultValue silent but for errors */
  logger?: InboxLogger;
}

/** What one retention run did. */
export interface RetentionRun {
  startedAt: Date;
  durationMs: number;
  /**
   * False when another instance held the retention lock at this run's first batch, so this one did
   * nothing; true when it cleaned (even if it stood down part-way, see `stoodDown`).
   */
  ran: boolean;
  /** True when it stopped before the end: the lock was taken between batches, or the scheduler is stopping. */
  stoodDown: boolean;
  /** Inbox rows deleted. */
  deleted: number;
  /** Attempts records deleted. */
  attemptsDeleted: number;
  /** Delete statements run (each at most `batchSize` rows). */
  batches: number;
  /** Age of the oldest completed row left (server clock), in ms; null when the inbox (scope) is empty. */
  oldestAgeMs: number | null;
}

/** A running retention schedule. */
export interface InboxRetention {
  /** The retention window: pass the same number as `inboxRetentionMs` to the broker consumers' retention guard. */
  readonly olderThanMs: number;
  /** The last run's report, once there was one. */
  readonly lastRun: RetentionRun | undefined;
  /** Runs now (waiting for a run in progress first) and resolves with its report; rejects when it failed. */
  runNow(): Promise<RetentionRun>;
  /** Stops scheduling; a run in progress stands down after its current batch. Resolves when it has. */
  stop(): Promise<void>;
}

/** The longest delay `setTimeout` honours; a longer one fires after 1 ms. */
const LONGEST_TIMER_MS = 2 ** 31 - 1;

function validate(options: InboxRetentionOptions): { jitter: number; statementTimeoutMs: number } {
  const { everyMs, jitter = 0.1, statementTimeoutMs = 30_000 } = options;
  const invalid = (text: string) => new InboxError(InboxErrorCodes.INVALID_OPTIONS, text);
  if (typeof everyMs !== 'number' || !Number.isFinite(everyMs) || everyMs < 1) throw invalid('everyMs must be a positive number of milliseconds');
  // Node runs a longer timer after 1 ms: a monthly schedule would purge back to back.
  if (everyMs > LONGEST_TIMER_MS) throw invalid(`everyMs must be at most ${LONGEST_TIMER_MS} ms (about 24.8 days, the longest timer Node keeps)`);
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1)) throw invalid('jitter must be a number from 0 to 1');
  if (!Number.isInteger(statementTimeoutMs) || statementTimeoutMs < 1) throw invalid('statementTimeoutMs must be an integer >= 1');
  return { jitter, statementTimeoutMs };
}

/**
 * Runs {@link purgeInbox} on a schedule, in the background, until `stop()`. Every `everyMs` (moved by
 * a random `jitter`), one run deletes completed rows older than `olderThanMs` in batches of at most
 * `batchSize`, each in its own short transaction with a `statement_timeout`, then stale attempts
 * records the same way. Live leased claims are never deleted.
 *
 * One instance cleans at a time: each batch's transaction first takes a PostgreSQL advisory lock
 * (transaction-scoped, per inbox table, `pg_try_advisory_xact_lock`), never waiting for it. A run
 * that finds it taken at its first batch does nothing (`ran: false`); one that loses it between
 * batches stands down (`stoodDown: true`). So deletes of several instances never run side by side,
 * and a crashed instance holds nothing (the lock ends with its transaction).
 *
 * Each run reports rows deleted and the age of the oldest record left (`onRun`, `lastRun`); a
 * failed run is reported (`onError`) and the schedule goes on.
 *
 * ```ts
 * const retention = startInboxRetention(db, { olderThanMs: 14 * DAY, everyMs: HOUR });
 * process.on('SIGTERM', () => retention.stop());
 * ```
 */
export function startInboxRetention(db: AnyPgDatabase, options: InboxRetentionOptions): InboxRetention {
  refuseUnsupportedClient(db, 'startInboxRetention');
  const { jitter, statementTimeoutMs } = validate(options);
  const plan: PurgePlan = planPurge({ ...options, maxBatches: options.maxBatchesPerRun ?? Number.POSITIVE_INFINITY });
  const statements = purgeStatements(plan);
  const logger = safeLogger(options.logger ?? defaultLogger);
  const lockKey = `inboxed:retention:${qualifiedName(plan.tables.inbox)}`;
  const inbox = sql.raw(qualifiedName(plan.tables.inbox));
  const scope = plan.consumer === undefined ? sql`` : sql`where consumer = ${plan.consumer}`;

  let stopping = false;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<RetentionRun> | undefined;
  let lastRun: RetentionRun | undefined;

  /** One batch inside its own transaction, behind the lock; `undefined` when the lock is taken or we are stopping. */
  const lockedBatch = (statement: SQL): Promise<number | undefined> => {
    if (stopping) return Promise.resolve(undefined);
    return db.transaction(async (tx) => {
      const [row] = rowsIn<{ got: boolean }>(
        await tx.execute(
          sql`select pg_try_advisory_xact_lock(hashtext(${lockKey})) as got, set_config('statement_timeout', ${String(statementTimeoutMs)}, true)`,
        ),
      );
      if (row?.got !== true) return undefined;
      return deleteBatch(tx, statement);
    });
  };

  const oldestAgeMs = async (): Promise<number | null> => {
    const [row] = rowsIn<{ ms: number | string | null }>(
      await db.execute(sql`select (extract(epoch from (now() - min(completed_at))) * 1000)::float8 as ms from ${inbox} ${scope}`),
    );
    return row?.ms === null || row?.ms === undefined ? null : Math.max(0, Math.round(Number(row.ms)));
  };

  const runOnce = async (): Promise<RetentionRun> => {
    const startedAt = new Date();
    const inboxPart = await runBatches(statements.inbox, plan, lockedBatch);
    const attemptsPart = inboxPart.stoodDown ? { deleted: 0, batches: 0, stoodDown: true } : await runBatches(statements.attempts, plan, lockedBatch);
    const batches = inboxPart.batches + attemptsPart.batches;
    const run: RetentionRun = {
      startedAt,
      durationMs: 0,
      ran: batches > 0,
      stoodDown: batches > 0 && (inboxPart.stoodDown || attemptsPart.stoodDown),
      deleted: inboxPart.deleted,
      attemptsDeleted: attemptsPart.deleted,
      batches,
      oldestAgeMs: await oldestAgeMs(),
    };
    run.durationMs = Date.now() - startedAt.getTime();
    return run;
  };

  const report = (run: RetentionRun) => {
    lastRun = run;
    recordRetentionRun({ deleted: run.deleted, oldestAgeMs: run.oldestAgeMs ?? undefined, consumer: plan.consumer });
    logger.debug({ ...run }, run.ran ? `inbox retention deleted ${run.deleted} rows` : 'inbox retention skipped: another instance is cleaning');
    try {
      options.onRun?.(run);
    } catch (error) {
      logger.error({ err: error }, 'inbox retention: onRun threw');
    }
  };

  const failure = (error: unknown): InboxError => {
    if (isInboxError(error)) return error;
    // Drizzle wraps driver errors: the statement timeout's SQLSTATE is on the cause.
    const sqlState = sqlStateOf(error) ?? sqlStateOf((error as { cause?: unknown } | null)?.cause);
    if (sqlState === '57014') {
      return new InboxError(
        InboxErrorCodes.RETENTION_FAILED,
        `an inbox retention statement ran longer than statementTimeoutMs (${statementTimeoutMs} ms) and was cancelled; use a smaller batchSize or a larger statementTimeoutMs`,
        { cause: error },
      );
    }
    const code = classifyDatabaseError(error) === 'unavailable' ? InboxErrorCodes.DATABASE_UNAVAILABLE : InboxErrorCodes.RETENTION_FAILED;
    return new InboxError(code, `inbox retention run failed: ${describeError(error)}`, { cause: error });
  };

  const start = (): Promise<RetentionRun> => {
    const previous = current ?? Promise.resolve(undefined);
    const run = previous
      .catch(() => undefined)
      .then(runOnce)
      .then(
        (done) => {
          report(done);
          return done;
        },
        (error: unknown) => {
          throw failure(error);
        },
      );
    current = run;
    void run.then(
      () => {
        if (current === run) current = undefined;
      },
      () => {
        if (current === run) current = undefined;
      },
    );
    return run;
  };

  const schedule = (delayMs: number) => {
    if (stopping) return;
    timer = setTimeout(
      () => {
        start()
          .catch((error: InboxError) => {
            try {
              if (options.onError === undefined) logger.error({ err: error, code: error.code }, error.message);
              else options.onError(error);
            } catch (thrown) {
              logger.error({ err: thrown }, 'inbox retention: onError threw');
            }
          })
          .finally(() => schedule(options.everyMs * (1 + (Math.random() * 2 - 1) * jitter)));
      },
      Math.min(delayMs, LONGEST_TIMER_MS),
    );
    timer.unref();
  };
  schedule(options.everyMs * jitter * Math.random());

  return {
    olderThanMs: plan.olderThanMs,
    get lastRun() {
      return lastRun;
    },
    runNow: start,
    async stop() {
      stopping = true;
      if (timer !== undefined) clearTimeout(timer);
      await current?.catch(() => undefined);
    },
  };
}
