import { usageError } from './cli-errors.js';

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION = /^(\d+)(ms|s|m|h|d)$/;
// A date, optionally with a time and an offset: 2024-05-01, 2024-05-01T12:00, 2024-05-01T12:00:00.000Z, ...+02:00
const ISO_DATE = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/;

/**
 * Parses a duration like `7d`, `12h`, `30m`, `45s` or `500ms` into milliseconds: one whole
 * positive number and one unit, nothing else (no spaces, fractions, signs or combined units).
 * Anything else is a usage error naming `what`.
 */
export function parseDuration(text: string, what = 'duration'): number {
  const match = DURATION.exec(text);
  if (match === null) throw usageError(`${what}: ${JSON.stringify(text)} is not a duration (use a whole number and a unit: 500ms, 45s, 30m, 12h, 7d)`);
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  if (!Number.isSafeInteger(ms) || ms <= 0) throw usageError(`${what}: ${JSON.stringify(text)} must be greater than zero and not absurdly large`);
  return ms;
}

/** `--since`: a duration back from `now` (`2h`) or an ISO 8601 date (`2024-05-01`, `2024-05-01T12:00:00Z`). */
export function parseSince(text: string, now: Date = new Date()): Date {
  if (DURATION.test(text)) return new Date(now.getTime() - parseDuration(text, '--since'));
  const date = ISO_DATE.test(text) ? new Date(text) : new Date(Number.NaN);
  if (Number.isNaN(date.getTime())) throw usageError(`--since: ${JSON.stringify(text)} is neither a duration (2h, 7d) nor an ISO date (2024-05-01T12:00:00Z)`);
  return date;
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
