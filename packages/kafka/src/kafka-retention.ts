import { describeError } from '@inboxed/core';
import { formatDuration, type RedeliveryHorizon } from '@inboxed/core/adapter';
import type { KafkaAdminLike, KafkaLike } from './kafka-types.js';

/** kafkajs `ConfigResourceTypes.TOPIC`. */
const TOPIC_RESOURCE = 2;
const CONFIG_NAMES = ['retention.ms', 'segment.ms', 'cleanup.policy'];

const unknown = (source: string, detail: string): RedeliveryHorizon => ({ kind: 'unknown', ms: null, source, detail });

/**
 * @internal A topic's redelivery horizon from its configuration. A record lives until the log segment
 * holding it is deleted, which happens once the segment's newest record is older than `retention.ms`:
 * up to `segment.ms` after the record itself would be (a group without committed offsets, or whose
 * offsets expired or were reset, replays everything still there). A `compact`-only topic keeps the
 * latest record of each key, and `retention.ms = -1` keeps everything: unbounded.
 */
export function topicHorizon(topic: string, entries: readonly { configName: string; configValue: string | null }[]): RedeliveryHorizon {
  const value = (name: string) => entries.find((entry) => entry.configName === name)?.configValue ?? undefined;
  const policy = value('cleanup.policy') ?? 'delete';
  if (!policy.split(',').some((part) => part.trim() === 'delete')) {
    return {
      kind: 'unbounded',
      ms: null,
      source: `kafka topic ${topic} cleanup.policy`,
      detail: `cleanup.policy ${policy}: a compacted topic keeps the latest record of each key indefinitely`,
    };
  }
  const retention = Number(value('retention.ms') ?? Number.NaN);
  if (!Number.isFinite(retention)) return unknown(`kafka topic ${topic}`, 'DescribeConfigs returned no retention.ms');
  if (retention < 0) {
    return { kind: 'unbounded', ms: null, source: `kafka topic ${topic} retention.ms`, detail: 'retention.ms -1: records are never deleted by age' };
  }
  const segment = Number(value('segment.ms') ?? Number.NaN);
  const segmentMs = Number.isFinite(segment) && segment > 0 ? segment : 0;
  return {
    kind: 'bounded',
    ms: retention + segmentMs,
    source: `kafka topic ${topic} retention.ms + segment.ms`,
    detail: `retention.ms ${formatDuration(retention)} + segment.ms ${formatDuration(segmentMs)}: Kafka deletes a whole log segment once its newest record is older than retention.ms`,
  };
}

async function describeTopic(admin: KafkaAdminLike, topic: string): Promise<RedeliveryHorizon> {
  try {
    const { resources } = await admin.describeConfigs({
      resources: [{ type: TOPIC_RESOURCE, name: topic, configNames: CONFIG_NAMES }],
      includeSynonyms: false,
    });
    const resource = resources.find((r) => r.resourceName === topic) ?? resources[0];
    if (resource === undefined) return unknown(`kafka topic ${topic}`, 'DescribeConfigs returned no configuration');
    if (resource.errorCode !== 0)
      return unknown(`kafka topic ${topic}`, `DescribeConfigs failed: error code ${resource.errorCode} ${resource.errorMessage ?? ''}`.trim());
    return topicHorizon(topic, resource.configEntries);
  } catch (error) {
    return unknown(`kafka topic ${topic}`, `DescribeConfigs failed: ${describeError(error)}`);
  }
}

/**
 * @internal The redelivery horizon of each subscribed topic (patterns resolved with `listTopics`),
 * read through a short-lived admin client. Never rejects: what cannot be read is `unknown`, with why.
 */
export async function readKafkaHorizons(kafka: KafkaLike, topics: readonly (string | RegExp)[]): Promise<RedeliveryHorizon[]> {
  const label = (topic: string | RegExp) => (typeof topic === 'string' ? `kafka topic ${topic}` : `kafka topics matching ${topic}`);
  if (typeof kafka.admin !== 'function') return topics.map((topic) => unknown(label(topic), 'the Kafka client has no admin() to read the topic configuration'));
  const admin = kafka.admin();
  try {
    await admin.connect();
  } catch (error) {
    await admin.disconnect().catch(() => undefined);
    return topics.map((topic) => unknown(label(topic), `the admin client could not connect: ${describeError(error)}`));
  }
  try {
    const horizons: RedeliveryHorizon[] = [];
    const names = new Set<string>();
    let existing: string[] | undefined;
    for (const topic of topics) {
      if (typeof topic === 'string') {
        names.add(topic);
        continue;
      }
      try {
        existing ??= admin.listTopics === undefined ? undefined : await admin.listTopics();
      } catch (error) {
        horizons.push(unknown(label(topic), `listing the topics failed: ${describeError(error)}`));
        continue;
      }
      const matching = existing?.filter((name) => topic.test(name)) ?? [];
      if (matching.length === 0)
        horizons.push(unknown(label(topic), existing === undefined ? 'the admin client cannot list topics' : 'no topic matches it yet'));
      for (const name of matching) names.add(name);
    }
    for (const name of names) horizons.push(await describeTopic(admin, name));
    return horizons;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}
