import { describe, expect, it } from 'vitest';
import { formatDuration, MAX_DURATION_MS, parseDuration, parsePositiveInteger, parseSince } from './duration.js';

describe('durations', () => {
  it('reads one whole number and one unit', () => {
    expect(parseDuration('7d')).toBe(604_800_000);
    expect(parseDuration('12h')).toBe(43_200_000);
    expect(parseDuration('30m')).toBe(1_800_000);
    expect(parseDuration('45s')).toBe(45_000);
    expect(parseDuration('500ms')).toBe(500);
  });

  it.each(['', '7', 'd', '7 d', ' 7d', '7d ', '1.5h', '-1h', '+1h', '0s', '1h30m', '7D', '7days', '1e3ms', '99999999999999999d'])(
    'refuses %j as a usage error',
    (text) => {
      expect(() => parseDuration(text, '--older-than')).toThrow(expect.objectContaining({ code: 'USAGE_ERROR' }));
    },
  );

  it('accepts up to 100 years; anything longer is a usage error, never a window PostgreSQL cannot compute', () => {
    expect(MAX_DURATION_MS).toBe(3_155_760_000_000);
    expect(parseDuration('36525d')).toBe(MAX_DURATION_MS);
    expect(parseDuration('3155760000000ms')).toBe(MAX_DURATION_MS);
    for (const bad of ['36526d', '3155760000001ms', '100000000d', '9007199254740991ms', `${'9'.repeat(400)}d`])
      expect(() => parseDuration(bad, '--older-than'), bad).toThrow(
        expect.objectContaining({ code: 'USAGE_ERROR', message: expect.stringContaining('100 years') }),
      );
  });

  it('formats back to the shortest exact form', () => {
    expect([604_800_000, 5_400_000, 45_000, 1_500].map(formatDuration)).toEqual(['7d', '90m', '45s', '1500ms']);
  });

  it('reads --since as a duration back from now or an ISO date', () => {
    const now = new Date('2024-05-01T12:00:00Z');
    expect(parseSince('2h', now).toISOString()).toBe('2024-05-01T10:00:00.000Z');
    expect(parseSince('2024-04-30T08:00:00Z', now).toISOString()).toBe('2024-04-30T08:00:00.000Z');
    expect(parseSince('2024-04-30T10:00:00+02:00', now).toISOString()).toBe('2024-04-30T08:00:00.000Z');
    for (const bad of ['yesterday', '2024-13-01', '2024-05-01T25:00:00Z', '1714564800', 'May 1 2024'])
      expect(() => parseSince(bad, now), bad).toThrow(expect.objectContaining({ code: 'USAGE_ERROR' }));
  });

  it('reads --since dates only as written: years 0001 to 9999, days and times that exist', () => {
    const now = new Date('2024-05-01T12:00:00Z');
    expect(parseSince('2024-02-29', now).toISOString()).toBe('2024-02-29T00:00:00.000Z');
    expect(parseSince('0001-01-01', now).toISOString()).toBe('0001-01-01T00:00:00.000Z');
    expect(parseSince('9999-12-31T23:59:59Z', now).toISOString()).toBe('9999-12-31T23:59:59.000Z');
    expect(parseSince('2000-02-29T10:00:00+0200', now).toISOString()).toBe('2000-02-29T08:00:00.000Z');
    expect(parseSince('36525d', now).getTime()).toBe(now.getTime() - 3_155_760_000_000);
    const bad = [
      '2023-02-30', // was read as 2023-03-02
      '2023-02-29',
      '1900-02-29',
      '2024-04-31',
      '2024-00-10',
      '2024-05-00',
      '0000-01-01',
      '0000-12-31T23:00:00Z',
      '0001-01-01T00:00:00+01:00', // year 0 in UTC
      '9999-12-31T23:00:00-02:00', // year 10000 in UTC
      '2024-05-01T24:00',
      '2024-05-01T12:60',
      '2024-05-01T12:00:60Z',
      '2024-05-01T12:00+24:00',
      '100000000d',
      '9007199254740991ms',
    ];
    for (const text of bad) expect(() => parseSince(text, now), text).toThrow(expect.objectContaining({ code: 'USAGE_ERROR' }));
  });

  it('reads whole positive numbers only', () => {
    expect(parsePositiveInteger('25', '--limit')).toBe(25);
    for (const bad of ['0', '-1', '1.5', '1e2', 'ten', ''])
      expect(() => parsePositiveInteger(bad, '--limit'), bad).toThrow(expect.objectContaining({ code: 'USAGE_ERROR' }));
  });
});
