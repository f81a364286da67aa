import { InboxError, InboxErrorCodes } from '@inboxed/core';
import {
  backoffDelay,
  checkTablesAtStart,
  ConsumerEventEmitter,
  ConsumerLifecycle,
  DEFAULT_STOP_TIMEOUT_MS,
  defaultLogger,
  guardRetentionAtStart,
  InFlight,
  validateRetentionOptions,
  type ConsumerStatus,
  type InboxConsumer,
} from '@inboxed/core/adapter';
import { attachRuntime, type KafkaRuntime } from './kafka-batch.js';
import { KafkaErrorCodes, kafkaError } from './kafka-errors.js';
import { processingSettings, type KafkaConsumerOptions } from './kafka-options.js';
import { readKafkaHorizons } from './kafka-retention.js';
import type { KafkaConsumerLike, KafkaProducerLike } from './kafka-types.js';

/** One kafkajs consumer with its processing side; a crash kafkajs does not recover from replaces it. */
interface Session {
  consumer: KafkaConsumerLike;
  runtime: KafkaRuntime;
}

const asList = <T>(value: T | T[]): T[] => (Array.isArray(value) ? value : [value]);

/** Pauses every partition assigned to the consumer, so kafkajs fetches nothing more. */
function pauseAssigned(consumer: KafkaConsumerLike, runtime: KafkaRuntime): void {
  const assigned = runtime.group.assigned();
  const topics = [...new Set(assigned.map((a) => a.topic))];
  if (topics.length === 0) return;
  try {
    consumer.pause(topics.map((topic) => ({ topic, partitions: assigned.filter((a) => a.topic === topic).map((a) => a.partition) })));
  } catch {
    // Not running (any more): nothing is fetched anyway.
  }
}

/**
 * A kafkajs consumer group member whose handler effects commit exactly once per message id, with
 * auto-commit off: an offset is committed only after the record's outcome is final (processed,
 * duplicate, rejected, or dead-lettered with an acknowledged dead-letter record). A `retry` (or a
 * `busy`: another worker holds the message's lease) holds its partition at that record (paused,
 * seeked back, resumed after `retryAfterMs`) while other partitions keep flowing. Work of a past
 * group generation never commits, and once the group refuses a commit the member stops its
 * fetched records at once and rejoins.
 *
 * `status().connected` is true while the kafkajs consumer is connected and in the group;
 * `consuming` while it runs with at least one assigned partition that is not held for a retry.
 *
 * @example
 * const consumer = createKafkaConsumer({ kafka, groupId: 'billing', topics: ['payments'], handler: processor });
 * consumer.on('dead_letter', (outcome, topic) => log.warn({ outcome, topic }));
 * await consumer.start();
 */
export function createKafkaConsumer(options: KafkaConsumerOptions): InboxConsumer {
  const { kafka, groupId, handler, fromBeginning, partitionsConsumedConcurrently, consumerConfig, idempotentDeadLetters, producerConfig, restartOnCrash } =
    options;
  if (typeof groupId !== 'string' || groupId === '') throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.groupId must be a non-empty string');
  const settings = processingSettings(handler, options);
  const topics = asList(options.topics);
  if (topics.length === 0) throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.topics must name at least one topic');
  validateRetentionOptions(options);
  const stopTimeoutMs = options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS;
  const events = new ConsumerEventEmitter(options.logger ?? defaultLogger);
  const inFlight = new InFlight();
  const name = `kafka consumer of group ${groupId}`;
  let session: Session | undefined;
  let producer: KafkaProducerLike | undefined;
  let restarts = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  /** Set while the consumer is down after a crash: the delay before the restart, for the `reconnect` event. */
  let down: { since: number; delayMs: number } | undefined;

  const disconnect = async (what: 'consumer' | 'dead-letter producer', target: KafkaConsumerLike | KafkaProducerLike | undefined) => {
    await target
      ?.disconnect()
      .catch((error: unknown) => events.emit('error', kafkaError(KafkaErrorCodes.KAFKA_DISCONNECT_FAILED, `disconnecting the ${what} failed`, error)));
  };

  /** A fresh kafkajs consumer and its runtime, subscribed and running (its group join done or failed). */
  const launch = async (): Promise<void> => {
    const consumer = kafka.consumer({ ...consumerConfig, groupId });
    const runtime = attachRuntime({
      processor: handler,
      consumer,
      producer: producer!,
      events,
      settings,
      groupId,
      inFlight,
      taking: () => lifecycle.active && session?.consumer === consumer,
      signal: () => lifecycle.signal,
      listeners: {
        joined: (assignment) => {
          events.logger.info(
            { groupId, assignment: Object.fromEntries([...assignment].map(([topic, partitions]) => [topic, [...partitions]])) },
            'joined the group',
          );
          // A rebalance while stopping: the newly assigned partitions are not fetched either.
          if (!lifecycle.active) pauseAssigned(consumer, runtime);
          rejoined();
        },
        crashed: (error, restart) => crashed(consumer, error, restart),
      },
    });
    session = { consumer, runtime };
    try {
      await consumer.connect();
      await consumer.subscribe({ topics, fromBeginning: fromBeginning ?? true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: partitionsConsumedConcurrently ?? 1,
        eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) =>
          runtime.run({ topic: batch.topic, partition: batch.partition, messages: batch.messages, resolveOffset, heartbeat, isRunning, isStale }),
      });
    } catch (error) {
      runtime.close();
      await disconnect('consumer', consumer);
      throw kafkaError(KafkaErrorCodes.KAFKA_CONNECT_FAILED, `starting the Kafka consumer of group ${groupId} failed`, error, {
        details: { groupId, topics: topics.map(String) },
      });
    }
  };

  /** A join after a crash: the consumer is back. */
  const rejoined = () => {
    if (down === undefined) return;
    const { since, delayMs } = down;
    down = undefined;
    lifecycle.reconnected();
    events.emit('reconnect', { attempt: restarts, delayMs: delayMs || Date.now() - since });
    restarts = 0;
  };

  const crashed = (consumer: KafkaConsumerLike, error: unknown, restart: boolean) => {
    events.emit('error', kafkaError(KafkaErrorCodes.KAFKA_CONSUMER_CRASHED, 'the kafkajs consumer crashed', error, { details: { restart } }));
    // Stays down (still `running`, but neither connected nor consuming) with restartOnCrash: false.
    if (!lifecycle.active || session?.consumer !== consumer || (!restart && restartOnCrash === false)) return;
    lifecycle.reconnecting();
    restarts++;
    down ??= { since: Date.now(), delayMs: 0 };
    if (!restart) scheduleRestart();
  };

  /** After a crash kafkajs will not recover from: a new consumer resumes from the committed offsets. */
  const scheduleRestart = () => {
    const delayMs = backoffDelay(restarts, { baseDelayMs: 1000, maxDelayMs: 30_000, jitter: 'equal' });
    events.logger.warn({ groupId, attempt: restarts, delayMs }, 'kafkajs will not restart the crashed consumer; starting a new one after the delay');
    down = { since: Date.now(), delayMs };
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      if (!lifecycle.active) return;
      session?.runtime.close();
      launch().catch((error: unknown) => {
        events.emit('error', error as InboxError);
        if (!lifecycle.active) return;
        restarts++;
        scheduleRestart();
      });
    }, delayMs);
  };

  const lifecycle = new ConsumerLifecycle(
    {
      async begin() {
        await checkTablesAtStart(handler, events);
        // Before anything connects: a refusal leaves nothing open.
        await guardRetentionAtStart(options, () => readKafkaHorizons(kafka, topics), events.logger, name);
        producer = options.producer ?? kafka.producer({ idempotent: idempotentDeadLetters ?? true, maxInFlightRequests: 1, ...producerConfig });
        try {
          if (options.producer === undefined) await producer.connect();
        } catch (error) {
          await disconnect('dead-letter producer', producer);
          throw kafkaError(KafkaErrorCodes.KAFKA_CONNECT_FAILED, 'connecting the dead-letter producer failed', error, { details: { groupId } });
        }
        try {
          await launch();
        } catch (error) {
          session = undefined;
          if (options.producer === undefined) await disconnect('dead-letter producer', producer);
          throw error;
        }
      },
      async quiesce() {
        clearTimeout(restartTimer);
        if (session === undefined) return;
        // No new fetches while what is in flight finishes (its batches stop at their next record).
        session.runtime.holds.cancelAll();
        pauseAssigned(session.consumer, session.runtime);
      },
      async end() {
        clearTimeout(restartTimer);
        down = undefined;
        const ending = session;
        session = undefined;
        ending?.runtime.close();
        const disconnecting = (async () => {
          await disconnect('consumer', ending?.consumer);
          if (options.producer === undefined) await disconnect('dead-letter producer', producer);
        })();
        // A handler still running past stopTimeoutMs keeps kafkajs' stop() waiting for it: let the
        // disconnect finish in the background once it returns (nothing it did commits: the runtime is closed).
        if (inFlight.size === 0) await disconnecting;
      },
      connected: () => (session?.runtime.group.connected ?? false) && (session?.runtime.group.member ?? false),
    },
    events,
    inFlight,
    stopTimeoutMs,
    name,
  );

  return {
    start: () => lifecycle.start(),
    stop: () => lifecycle.stop(),
    on: (event, listener) => events.on(event, listener),
    redeliveryHorizon: () => readKafkaHorizons(kafka, topics),
    status(): ConsumerStatus {
      const status = lifecycle.status();
      return { ...status, consuming: status.consuming && (session?.runtime.consuming() ?? false) };
    },
  };
}
