import { describe, expect, it } from 'vitest';
import { readKafkaHorizons, topicHorizon } from './kafka-retention.js';
import type { KafkaAdminLike, KafkaLike } from './kafka-types.js';

const DAY = 86_400_000;
const entries = (configs: Record<string, string>) => Object.entries(configs).map(([configName, configValue]) => ({ configName, configValue }));

/** A client whose admin answers DescribeConfigs from `configs` (what the mock broker cannot). */
function fakeKafka(configs: Record<string, Record<string, string> | Error>, topics: string[] = Object.keys(configs)): KafkaLike & { disconnects: number } {
  const fake = {
    disconnects: 0,
    consumer: () => {
      throw new Error('not used');
    },
    producer: () => {
      throw new Error('not used');
    },
    admin: (): KafkaAdminLike => ({
      connect: async () => {},
      disconnect: async () => void fake.disconnects++,
      listTopics: async () => topics,
      async describeConfigs({ resources }) {
        const name = resources[0]!.name;
        const found = configs[name];
        if (found instanceof Error) throw found;
        if (found === undefined)
          return { resources: [{ resourceName: name, errorCode: 3, errorMessage: 'This server does not host this topic-partition', configEntries: [] }] };
        return { resources: [{ resourceName: name, errorCode: 0, configEntries: entries(found) }] };
      },
    }),
  };
  return fake;
}

describe('kafka redelivery horizon', () => {
  it('is retention.ms + segment.ms for a delete policy, unbounded for retention.ms -1 or compaction only', () => {
    expect(topicHorizon('orders', entries({ 'retention.ms': String(7 * DAY), 'segment.ms': String(7 * DAY), 'cleanup.policy': 'delete' }))).toMatchObject({
      kind: 'bounded',
      ms: 14 * DAY,
      source: 'kafka topic orders retention.ms + segment.ms',
    });
    expect(topicHorizon('orders', entries({ 'retention.ms': String(DAY), 'cleanup.policy': 'compact,delete' }))).toMatchObject({ kind: 'bounded', ms: DAY });
    expect(topicHorizon('orders', entries({ 'retention.ms': '-1', 'segment.ms': String(DAY) }))).toMatchObject({ kind: 'unbounded', ms: null });
    expect(topicHorizon('orders', entries({ 'retention.ms': String(DAY), 'cleanup.policy': 'compact' }))).toMatchObject({
      kind: 'unbounded',
      source: 'kafka topic orders cleanup.policy',
    });
    expect(topicHorizon('orders', [])).toMatchObject({ kind: 'unknown' });
  });

  it('reads every subscribed topic (patterns through listTopics), reports what it cannot read, and disconnects', async () => {
    const kafka = fakeKafka(
      { a: { 'retention.ms': String(DAY), 'segment.ms': String(DAY) }, 'events.1': { 'retention.ms': '-1' }, broken: new Error('boom') },
      ['a', 'events.1', 'broken', 'other'],
    );
    const horizons = await readKafkaHorizons(kafka, ['a', /^events\./, /^nothing/, 'broken', 'missing']);
    expect(horizons.map((h) => [h.kind, h.source])).toEqual([
      ['unknown', 'kafka topics matching /^nothing/'],
      ['bounded', 'kafka topic a retention.ms + segment.ms'],
      ['unbounded', 'kafka topic events.1 retention.ms'],
      ['unknown', 'kafka topic broken'],
      ['unknown', 'kafka topic missing'],
    ]);
    expect(horizons[3]?.detail).toContain('boom');
    expect(horizons[4]?.detail).toContain('error code 3');
    expect(kafka.disconnects).toBe(1);
    const { admin: _, ...noAdmin } = kafka;
    expect(await readKafkaHorizons(noAdmin, ['a'])).toEqual([expect.objectContaining({ kind: 'unknown', detail: expect.stringContaining('no admin()') })]);
  });
});
