/**
 * The small part of the kafkajs API this adapter uses, typed structurally so any client with a
 * KafkaJS-compatible surface (kafkajs itself, Confluent's `@confluentinc/kafka-javascript`
 * KafkaJS API) can be passed in without this package importing it.
 */

/** Kafka record headers as kafkajs delivers them. */
export type KafkaHeaders = Record<string, Buffer | string | (Buffer | string)[] | undefined>;

/** One consumed record. */
export interface KafkaRecord {
  key: Buffer | null;
  value: Buffer | null;
  /** The record's offset, a decimal string (kafkajs keeps offsets as strings: they are int64). */
  offset: string;
  timestamp: string;
  headers?: KafkaHeaders;
}

/** A record to produce. */
export interface KafkaOutgoingRecord {
  key?: Buffer | string | null;
  value: Buffer | string | null;
  headers?: Record<string, Buffer | string>;
}

/** The argument of `consumer.run({ eachMessage })`. */
export interface EachMessagePayloadLike {
  topic: string;
  partition: number;
  message: KafkaRecord;
  heartbeat(): Promise<void>;
  pause(): () => void;
}

/** One fetched batch of a partition. */
export interface KafkaBatchLike {
  topic: string;
  partition: number;
  messages: KafkaRecord[];
}

/** The argument of `consumer.run({ eachBatch })`. */
export interface EachBatchPayloadLike {
  batch: KafkaBatchLike;
  resolveOffset(offset: string): void;
  heartbeat(): Promise<void>;
  pause(): () => void;
  /** False once the consumer stops. */
  isRunning(): boolean;
  /** True once the partition was seeked (its fetched records are no longer what comes next). */
  isStale(): boolean;
}

/** A topic-partition list as `pause()`/`resume()` take it. */
export type TopicPartitions = Array<{ topic: string; partitions?: number[] }>;

/** The kafkajs instrumentation events the adapter follows (group membership, crashes, stops). */
export interface KafkaConsumerEventNames {
  CONNECT: string;
  DISCONNECT: string;
  GROUP_JOIN: string;
  REBALANCING: string;
  CRASH: string;
  STOP: string;
}

/** The consumer methods the adapter calls. */
export interface KafkaConsumerLike {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  subscribe(subscription: { topics: (string | RegExp)[]; fromBeginning?: boolean }): Promise<void>;
  run(config: {
    autoCommit?: boolean;
    eachBatchAutoResolve?: boolean;
    partitionsConsumedConcurrently?: number;
    eachMessage?: (payload: EachMessagePayloadLike) => Promise<void>;
    eachBatch?: (payload: EachBatchPayloadLike) => Promise<void>;
  }): Promise<void>;
  stop(): Promise<void>;
  commitOffsets(offsets: Array<{ topic: string; partition: number; offset: string }>): Promise<void>;
  seek(target: { topic: string; partition: number; offset: string }): void;
  pause(topics: TopicPartitions): void;
  resume(topics: TopicPartitions): void;
  /** Instrumentation events: the adapter follows connects, group joins, rebalances, crashes and stops. */
  // biome-ignore lint/suspicious/noExplicitAny: kafkajs types instrumentation payloads per event; listeners narrow them.
  on(eventName: string, listener: (event: { payload: any }) => void): () => void;
  readonly events: KafkaConsumerEventNames;
}

/** The producer methods the adapter calls (dead-letter records only). */
export interface KafkaProducerLike {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  send(record: { topic: string; messages: KafkaOutgoingRecord[]; acks?: number }): Promise<unknown>;
}

/** Consumer settings the adapter passes to `kafka.consumer()`; your `consumerConfig` is merged over them. */
export interface KafkaConsumerConfigLike {
  groupId: string;
  sessionTimeout?: number;
  heartbeatInterval?: number;
  rebalanceTimeout?: number;
  maxWaitTimeInMs?: number;
  maxBytesPerPartition?: number;
  allowAutoTopicCreation?: boolean;
  [key: string]: unknown;
}

/** Producer settings for the dead-letter producer. */
export interface KafkaProducerConfigLike {
  idempotent?: boolean;
  maxInFlightRequests?: number;
  allowAutoTopicCreation?: boolean;
  [key: string]: unknown;
}

/** A topic's configuration as `admin.describeConfigs` returns it. */
export interface KafkaTopicConfigsLike {
  resources: { resourceName: string; errorCode: number; errorMessage?: string | null; configEntries: { configName: string; configValue: string | null }[] }[];
}

/** The admin methods the retention guard calls (reading a topic's `retention.ms`, `segment.ms` and `cleanup.policy`). */
export interface KafkaAdminLike {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  /** Resolves topic patterns; without it a pattern's horizon is unknown. */
  listTopics?(): Promise<string[]>;
  /** kafkajs `describeConfigs`; resource `type` 2 is a topic (`ConfigResourceTypes.TOPIC`). */
  describeConfigs(request: { resources: { type: number; name: string; configNames?: string[] }[]; includeSynonyms: boolean }): Promise<KafkaTopicConfigsLike>;
}

/** A kafkajs `Kafka` instance, or anything that makes compatible consumers and producers. */
export interface KafkaLike {
  consumer(config: KafkaConsumerConfigLike): KafkaConsumerLike;
  producer(config?: KafkaProducerConfigLike): KafkaProducerLike;
  /** Used by the retention guard only; without it the topics' horizons are unknown. */
  admin?(): KafkaAdminLike;
}
