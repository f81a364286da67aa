import { describe, expect, it } from 'vitest';
import { type InboxError, InboxErrorCodes } from '../errors.js';
import type { InboxLogger } from './logger.js';
import { checkRetentionHorizon, formatDuration, guardRetentionAtStart, type RedeliveryHorizon, validateRetentionOptions } from './retention-guard.js';

const DAY = 86_400_000;

function recordingLogger(): InboxLogger & { warnings: { fields: Record<string, unknown>; message: string }[] } {
  const warnings: { fields: Record<string, unknown>; message: string }[] = [];
  return { warnings, debug() {}, info() {}, error() {}, warn: (fields, message) => void warnings.push({ fields, message: String(message) }) };
}

const kafkaOrders: RedeliveryHorizon = { kind: 'bounded', ms: 7 * DAY, source: 'kafka topic orders retention.ms' };

describe('retention guard', () => {
  it('formats durations in the largest unit they fill', () => {
    expect([7 * DAY, DAY, 1.5 * DAY, 36e5, 90_000, 1000, 250, 0].map(formatDuration)).toEqual(['7d', '1d', '1.5d', '1h', '1.5min', '1s', '250ms', '0ms']);
  });

  it('warns with both numbers, in human units and ms, when the inbox forgets sooner than the broker redelivers', () => {
    const logger = recordingLogger();
    const finding = checkRetentionHorizon({ inboxRetentionMs: DAY, horizons: [kafkaOrders], logger, consumer: 'kafka consumer of group billing' });
    const expected =
      'kafka consumer of group billing: inbox retention 1d (86400000 ms) is shorter than the redelivery horizon of kafka topic orders retention.ms 7d (604800000 ms): ' +
      'a copy redelivered after its inbox record was purged would be processed again';
    expect(finding?.message.startsWith(expected)).toBe(true);
    expect(logger.warnings).toEqual([
      {
        message: finding?.message,
        fields: {
          consumer: 'kafka consumer of group billing',
          inboxRetentionMs: DAY,
          redeliveryHorizonMs: 7 * DAY,
          horizonKind: 'bounded',
          source: 'kafka topic orders retention.ms',
        },
      },
    ]);
  });

  it('picks the longest horizon, an unbounded or unknown one before any number', () => {
    const short: RedeliveryHorizon = { kind: 'bounded', ms: 2 * DAY, source: 'kafka topic a retention.ms' };
    const unknown: RedeliveryHorizon = { kind: 'unknown', ms: null, source: 'kafka topic c', detail: 'DescribeConfigs is not supported' };
    const unbounded: RedeliveryHorizon = { kind: 'unbounded', ms: null, source: 'RabbitMQ queue q', detail: 'no x-message-ttl' };
    const logger = recordingLogger();
    expect(checkRetentionHorizon({ inboxRetentionMs: DAY, horizons: [short, kafkaOrders], logger, consumer: 'c' })?.horizon).toBe(kafkaOrders);
    const unread = checkRetentionHorizon({ inboxRetentionMs: DAY, horizons: [short, unknown], logger, consumer: 'c' })?.message;
    expect(unread).toContain('the redelivery horizon of kafka topic c, which could not be read: ');
    expect(unread?.endsWith('. Horizon: DescribeConfigs is not supported.')).toBe(true);
    const found = checkRetentionHorizon({ inboxRetentionMs: 30 * DAY, horizons: [unknown, unbounded, short], logger, consumer: 'c' });
    expect(found?.horizon).toBe(unbounded);
    expect(found?.message).toContain(
      'inbox retention 30d (2592000000 ms) is shorter than the redelivery horizon of RabbitMQ queue q, which is unbounded (the broker keeps messages indefinitely)',
    );
    expect(found?.message).toContain('set redeliveryHorizonMs');
  });

  it('stays silent when the retention outlasts every horizon, or there is none', () => {
    const logger = recordingLogger();
    expect(checkRetentionHorizon({ inboxRetentionMs: 7 * DAY, horizons: [kafkaOrders], logger, consumer: 'c' })).toBeUndefined();
    expect(checkRetentionHorizon({ inboxRetentionMs: DAY, horizons: [], logger, consumer: 'c' })).toBeUndefined();
    expect(logger.warnings).toEqual([]);
  });

  it('refuses with RETENTION_TOO_SHORT when strict, and logs nothing', () => {
    const logger = recordingLogger();
    let error: InboxError | undefined;
    try {
      checkRetentionHorizon({ inboxRetentionMs: DAY, horizons: [kafkaOrders], strict: true, logger, consumer: 'c' });
    } catch (thrown) {
      error = thrown as InboxError;
    }
    expect(error?.code).toBe(InboxErrorCodes.RETENTION_TOO_SHORT);
    expect(error?.message).toContain('1d (86400000 ms)');
    expect(error?.message).toContain('7d (604800000 ms)');
    expect(error?.details).toMatchObject({ inboxRetentionMs: DAY, redeliveryHorizonMs: 7 * DAY });
    expect(logger.warnings).toEqual([]);
  });

  it('at start: does nothing without inboxRetentionMs, and uses redeliveryHorizonMs instead of asking the broker', async () => {
    const logger = recordingLogger();
    let asked = 0;
    const read = async () => {
      asked++;
      return [kafkaOrders];
    };
    expect(await guardRetentionAtStart({}, read, logger, 'c')).toBeUndefined();
    expect(await guardRetentionAtStart({ inboxRetentionMs: DAY, redeliveryHorizonMs: DAY }, read, logger, 'c')).toBeUndefined();
    expect(asked).toBe(0);
    const found = await guardRetentionAtStart({ inboxRetentionMs: DAY, redeliveryHorizonMs: 2 * DAY }, read, logger, 'c');
    expect(found?.message).toContain('the redelivery horizon of option redeliveryHorizonMs 2d (172800000 ms)');
    expect((await guardRetentionAtStart({ inboxRetentionMs: DAY }, read, logger, 'c'))?.horizon).toBe(kafkaOrders);
    expect(asked).toBe(1);
  });

  it('validates its options', () => {
    expect(() => validateRetentionOptions({ inboxRetentionMs: 0 })).toThrow(/inboxRetentionMs/);
    expect(() => validateRetentionOptions({ inboxRetentionMs: Number.NaN })).toThrow(/inboxRetentionMs/);
    expect(() => validateRetentionOptions({ strictRetention: true })).toThrow(/strictRetention needs options.inboxRetentionMs/);
    expect(() => validateRetentionOptions({ inboxRetentionMs: DAY, redeliveryHorizonMs: -1 })).toThrow(/redeliveryHorizonMs/);
    expect(() => validateRetentionOptions({ inboxRetentionMs: DAY, strictRetention: 'yes' as never })).toThrow(/strictRetention/);
    expect(() => validateRetentionOptions({ inboxRetentionMs: DAY, strictRetention: true, redeliveryHorizonMs: 0 })).not.toThrow();
  });
});
