import { InboxError, InboxErrorCodes } from '../errors.js';
import { defaultLogger, type InboxLogger, safeLogger } from './logger.js';

/**
 * How long after a message was first delivered the broker may still deliver a copy of it (a
 * producer's duplicate still queued, a replay from the start of a topic, a redelivery after a lost
 * ack): the window the inbox must remember a message id for. Discriminated by `kind`:
 * - `bounded`: the broker drops a message after `ms` (Kafka `retention.ms`, SQS
 *   `MessageRetentionPeriod`, RabbitMQ `x-message-ttl`);
 * - `unbounded`: the broker keeps messages until consumed or forever (a RabbitMQ queue without a
 *   TTL, Kafka `retention.ms = -1` or a compacted topic);
 * - `unknown`: the consumer could not read it (`detail` says why).
 */
export type RedeliveryHorizon =
  | { kind: 'bounded'; ms: number; source: string; detail?: string }
  | { kind: 'unbounded'; ms: null; source: string; detail?: string }
  | { kind: 'unknown'; ms: null; source: string; detail: string };

/**
 * The retention guard's options, taken by every broker consumer: at `start()` a consumer compares
 * `inboxRetentionMs` with its broker's redelivery horizon and warns (or, with `strictRetention`,
 * refuses to start with `RETENTION_TOO_SHORT`) when the inbox forgets message ids sooner than the
 * broker may redeliver them.
 */
export interface RetentionGuardOptions {
  /**
   * How long your inbox keeps completed records, in ms: the `olderThanMs` you give
   * `startInboxRetention` (or `purgeInbox`). Without it the guard does nothing.
   * @defaultValue none (no guard)
   */
  inboxRetentionMs?: number | undefined;
  /** Refuse to start (`RETENTION_TOO_SHORT`) instead of warning. Needs `inboxRetentionMs`. @defaultValue false */
  strictRetention?: boolean | undefined;
  /**
   * The longest time after which your broker may still redeliver a message, in ms, used instead of
   * what the broker reports (then the broker is not asked): for a horizon the consumer cannot see
   * (a RabbitMQ policy, a topic it may not describe), or a bound you guarantee yourself.
   * @defaultValue none (asked from the broker)
   */
  redeliveryHorizonMs?: number | undefined;
}

/** What the guard found: the inbox retention is shorter than `horizon`. */
export interface RetentionFinding {
  inboxRetentionMs: number;
  /** The longest horizon (an unbounded or unknown one before any bounded one). */
  horizon: RedeliveryHorizon;
  /** The warning, naming both durations. */
  message: string;
}

const UNITS: readonly [string, number][] = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['min', 60_000],
  ['s', 1000],
];

/** A duration in the largest unit it fills at least once, with up to two decimals: `7d`, `1.5h`, `250ms`. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of UNITS) {
    if (ms >= size) return `${Number((ms / size).toFixed(2))}${unit}`;
  }
  return `${Number(ms.toFixed(2))}ms`;
}

const both = (ms: number) => `${formatDuration(ms)} (${ms} ms)`;

function invalid(message: string): never {
  throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, message);
}

/** Validates the retention guard's options (throws `INVALID_OPTIONS`), as broker consumers do at construction. */
export function validateRetentionOptions(options: RetentionGuardOptions): void {
  const { inboxRetentionMs, strictRetention, redeliveryHorizonMs } = options;
  if (inboxRetentionMs !== undefined && (typeof inboxRetentionMs !== 'number' || !Number.isFinite(inboxRetentionMs) || inboxRetentionMs <= 0))
    invalid('options.inboxRetentionMs must be a positive number of milliseconds');
  if (strictRetention !== undefined && typeof strictRetention !== 'boolean') invalid('options.strictRetention must be a boolean');
  if (strictRetention === true && inboxRetentionMs === undefined)
    invalid('options.strictRetention needs options.inboxRetentionMs (the olderThanMs your inbox is purged with)');
  if (redeliveryHorizonMs !== undefined && (typeof redeliveryHorizonMs !== 'number' || !Number.isFinite(redeliveryHorizonMs) || redeliveryHorizonMs < 0))
    invalid('options.redeliveryHorizonMs must be a number of milliseconds >= 0');
}

/** Orders horizons longest first: unbounded, then unknown, then bounded by `ms`. */
function longest(horizons: readonly RedeliveryHorizon[]): RedeliveryHorizon | undefined {
  const rank = (h: RedeliveryHorizon) => (h.kind === 'unbounded' ? Number.POSITIVE_INFINITY : h.kind === 'unknown' ? Number.MAX_VALUE : h.ms);
  let top: RedeliveryHorizon | undefined;
  for (const horizon of horizons) if (top === undefined || rank(horizon) > rank(top)) top = horizon;
  return top;
}

function describeHorizon(horizon: RedeliveryHorizon): string {
  switch (horizon.kind) {
    case 'bounded':
      return `the redelivery horizon of ${horizon.source} ${both(horizon.ms)}`;
    case 'unbounded':
      return `the redelivery horizon of ${horizon.source}, which is unbounded (the broker keeps messages indefinitely)`;
    case 'unknown':
      return `the redelivery horizon of ${horizon.source}, which could not be read`;
  }
}

/**
 * Compares the inbox retention with the broker's redelivery horizons. When the inbox forgets a
 * message id sooner than the broker may redeliver the message (or the horizon is unbounded or
 * unknown), logs a warning with both numbers and returns the finding; with `strict` throws
 * `RETENTION_TOO_SHORT` instead. No horizons, or a retention at least as long as each: `undefined`.
 *
 * With the default (silent) logger the warning goes to `process.emitWarning`, so it is never lost.
 */
export function checkRetentionHorizon(input: {
  inboxRetentionMs: number;
  horizons: readonly RedeliveryHorizon[];
  strict?: boolean | undefined;
  logger?: InboxLogger | undefined;
  /** Names the consumer in the message, e.g. `kafka consumer of group billing`. */
  consumer: string;
}): RetentionFinding | undefined {
  const { inboxRetentionMs, strict = false, logger = defaultLogger, consumer } = input;
  const horizon = longest(input.horizons);
  if (horizon === undefined || (horizon.kind === 'bounded' && inboxRetentionMs >= horizon.ms)) return undefined;
  const advice =
    horizon.kind === 'bounded'
      ? 'keep inbox records at least that long (olderThanMs of startInboxRetention or purgeInbox, and inboxRetentionMs)'
      : 'set redeliveryHorizonMs to the longest time after which the broker may still redeliver a message, and keep inbox records at least that long';
  const message =
    `${consumer}: inbox retention ${both(inboxRetentionMs)} is shorter than ${describeHorizon(horizon)}: ` +
    `a copy redelivered after its inbox record was purged would be processed again; ${advice}.` +
    (horizon.detail === undefined ? '' : ` Horizon: ${horizon.detail}.`);
  const details = {
    consumer,
    inboxRetentionMs,
    redeliveryHorizonMs: horizon.ms,
    horizonKind: horizon.kind,
    source: horizon.source,
    ...(horizon.detail === undefined ? {} : { detail: horizon.detail }),
  };
  if (strict) throw new InboxError(InboxErrorCodes.RETENTION_TOO_SHORT, message, { details });
  safeLogger(logger).warn(details, message);
  if (logger === defaultLogger) process.emitWarning(message, { type: 'InboxedWarning', code: InboxErrorCodes.RETENTION_TOO_SHORT });
  return { inboxRetentionMs, horizon, message };
}

/**
 * The guard as every broker consumer runs it in `start()`, before it consumes: nothing without
 * `inboxRetentionMs`; `redeliveryHorizonMs` when given (the broker is not asked), else the
 * horizons `readHorizons` gets from the broker.
 */
export async function guardRetentionAtStart(
  options: RetentionGuardOptions,
  readHorizons: () => Promise<RedeliveryHorizon[]>,
  logger: InboxLogger,
  consumer: string,
): Promise<RetentionFinding | undefined> {
  const { inboxRetentionMs, redeliveryHorizonMs, strictRetention } = options;
  if (inboxRetentionMs === undefined) return undefined;
  const horizons: RedeliveryHorizon[] =
    redeliveryHorizonMs === undefined ? await readHorizons() : [{ kind: 'bounded', ms: redeliveryHorizonMs, source: 'option redeliveryHorizonMs' }];
  return checkRetentionHorizon({ inboxRetentionMs, horizons, strict: strictRetention, logger, consumer });
}
