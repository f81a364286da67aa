import { usageError } from './cli-errors.js';

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION = /^(\d+)(ms|s|m|h|d)$/;
/** The longest duration accepted: 100 years of 365.25 days (`36525d`). Longer windows reach past what PostgreSQL's timestamps hold. */
export const MAX_DURATION_MS = 3_155_760_000_000;
// A date, optionally with a time and an offset: 2024-05-01, 2024-05-01T12:00, 2024-05-01T12:00:00.000Z, ...+02:00
const ISO_DATE = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,6})?)?(Z|[+-](\d{2}):?(\d{2}))?)?$/;

/**
 * Parses a duration like `7d`, `12h`, `30m`, `45s` or `500ms` into milliseconds: one whole
 * positive number and one unit, nothing else (no spaces, fractions, signs or combined units), at
 * most 100 years ({@link MAX_DURATION_MS}). Anything else is a usage error naming `what`.
 */
export function parseDuration(text: string, what = 'duration'): number {
  const match = DURATION.exec(text);
  if (match === null) throw usageError(`${what}: ${JSON.stringify(text)} is not a duration (use a whole number and a unit: 500ms, 45s, 30m, 12h, 7d)`);
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  if (ms <= 0) throw usageError(`${what}: ${JSON.stringify(text)} must be greater than zero`);
  if (ms > MAX_DURATION_MS) throw usageError(`${what}: ${JSON.stringify(text)} is longer than 100 years (36525d)`);
  return ms;
}

/**
 * `--since`: a duration back from `now` (`2h`) or an ISO 8601 date (`2024-05-01`,
 * `2024-05-01T12:00:00Z`) of a year from 0001 to 9999 that exists as written: `2023-02-30` or
 * `T24:00` are usage errors, never read as another day.
 */
export function parseSince(text: string, now: Date = new Date()): Date {
  if (DURATION.test(text)) return new Date(now.getTime() - parseDuration(text, '--since'));
  const date = ISO_DATE.test(text) && isRealDate(text) ? new Date(text) : new Date(Number.NaN);
  const year = date.getUTCFullYear();
  if (Number.isNaN(date.getTime())) throw usageError(`--since: ${JSON.stringify(text)} is neither a duration (2h, 7d) nor an ISO date (2024-05-01T12:00:00Z)`);
  if (year < 1 || year > 9999) throw usageError(`--since: ${JSON.stringify(text)} is outside the years 0001 to 9999`);
  return date;
}

/** Whether the fields of an {@link ISO_DATE} text exist: year 0001 to 9999, month 1 to 12, a day of that month, 00:00 to 23:59:59, an offset up to 23:59. */
function isRealDate(text: string): boolean {
  const [, year, month, day, hour = '0', minute = '0', second = '0', , offsetHours = '0', offsetMinutes = '0'] = ISO_DATE.exec(text) ?? [];
  const [y, m, d] = [Number(year), Number(month), Number(day)];
  // Day 0 of the next month is the last day of this one (UTC, so no time zone moves it).
  const daysInMonth = new Date(Date.UTC(2000, m, 0)).getUTCDate() - (m === 2 && !isLeapYear(y) ? 1 : 0);
  return (
    y >= 1 &&
    y <= 9999 &&
    m >= 1 &&
    m <= 12 &&
    d >= 1 &&
    d <= daysInMonth &&
    Number(hour) <= 23 &&
    Number(minute) <= 59 &&
    Number(second) <= 59 &&
    Number(offsetHours) <= 23 &&
    Number(offsetMinutes) <= 59
  );
}

function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

/** A whole number >= 1 (`--limit`, `--batch-size`). */
export function parsePositiveInteger(text: string, what: string): number {
  const value = /^\d+$/.test(text) ? Number(text) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < 1) throw usageError(`${what}: ${JSON.stringify(text)} is not a whole number >= 1`);
  return value;
}

/** A duration in ms as the shortest exact text `parseDuration` reads back (`604800000` -> `7d`). */
export function formatDuration(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) if (ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`;
  return `${ms}ms`;
}
