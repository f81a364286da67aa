import { describe, expect, it } from 'vitest';
import { formatDuration, parseDuration, parsePositiveInteger, parseSince } from './duration.js';

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

  it('reads whole positive numbers only', () => {
    expect(parsePositiveInteger('25', '--limit')).toBe(25);
    for (const bad of ['0', '-1', '1.5', '1e2', 'ten', ''])
      expect(() => parsePositiveInteger(bad, '--limit'), bad).toThrow(expect.objectContaining({ code: 'USAGE_ERROR' }));
  });
});
