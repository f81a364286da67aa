import { type AnyInboxProcessor, describeError, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import { callProcessor, type ConsumerEventEmitter, type InFlight } from '@inboxed/core/adapter';
import { groupRefusal, KafkaErrorCodes, kafkaError } from './kafka-errors.js';
import { GroupMembership, type GroupListeners } from './kafka-group.js';
import { PartitionHolds } from './kafka-holds.js';
import { sourceOf, toInboxMessage } from './kafka-message.js';
import type { ProcessingSettings } from './kafka-options.js';
import { Settlement } from './kafka-settlement.js';
import type { KafkaConsumerLike, KafkaProducerLike, KafkaRecord } from './kafka-types.js';

const noop = () => {};

/** A partition's fetched records, as either kafkajs handler style delivers them. */
export interface FetchedRecords {
  topic: string;
  partition: number;
  messages: KafkaRecord[];
  resolveOffset?(offset: string): void;
  heartbeat?(): Promise<void>;
  /** kafkajs eachBatch: false once the consumer stops. */
  isRunning?(): boolean;
  /** kafkajs eachBatch: true once the partition was seeked. */
  isStale?(): boolean;
}

/** What a runtime is attached with: the processor, the broker clients, and the owner's lifecycle. */
export interface RuntimeDeps {
  processor: AnyInboxProcessor;
  consumer: KafkaConsumerLike;
  producer: KafkaProducerLike;
  events: ConsumerEventEmitter;
  settings: ProcessingSettings;
  groupId: string | undefined;
  /** True while new records may be taken (not stopping). */
  taking(): boolean;
  /** The signal handed to processor calls: it fires when the owner stops. */
  signal(): AbortSignal | undefined;
  /** Tracks every record being processed or settled, so a stop can wait for it. */
  inFlight: InFlight;
  listeners?: GroupListeners;
}

/** The processing side of one kafkajs consumer: group membership, retry holds, settlement and the batch loop. */
export interface KafkaRuntime {
  readonly group: GroupMembership;
  readonly holds: PartitionHolds;
  /** Processes one fetched batch (its records tracked in flight); rejects with the group's refusal once the member is fenced. */
  run(fetched: FetchedRecords): Promise<void>;
  /** True when some assigned partition is not held for a retry. */
  consuming(): boolean;
  /** Detaches from the consumer: nothing settles afterwards, no partition resumes. */
  close(): void;
}

/** Attaches the processing side to a kafkajs consumer (call before `run()`, so the first group join is seen). */
export function attachRuntime(deps: RuntimeDeps): KafkaRuntime {
  // OpenTelemetry: the topic is named per processor call; trace context arrives in the record headers (`message.headers`).
  deps.events.instrument({ system: 'kafka', consumerGroup: deps.groupId }, deps.inFlight);
  const holds = new PartitionHolds(deps.consumer, deps.settings.retryBackoff);
  let open = true;
  const group = new GroupMembership(deps.consumer, {
    joined(assignment) {
      holds.releaseAll();
      deps.listeners?.joined?.(assignment);
    },
    crashed: (error, restart) => deps.listeners?.crashed?.(error, restart),
  });
  const settlement = new Settlement({
    consumer: deps.consumer,
    producer: deps.producer,
    events: deps.events,
    processor: deps.processor,
    group,
    holds,
    deadLetterTopic: deps.settings.deadLetterTopic,
    groupId: deps.groupId,
    beforeSettle: deps.settings.beforeSettle,
    open: () => open,
  });
  const runner = new BatchRunner(deps, group, holds, settlement);
  return {
    group,
    holds,
    run: (fetched) => runner.run(fetched),
    consuming: () => group.assigned().some(({ topic, partition }) => !holds.isHeld(topic, partition)),
    close() {
      open = false;
      holds.cancelAll();
      group.close();
    },
  };
}

/**
 * Processes a partition's fetched records in offset order: one record per call of a per-message
 * processor, up to `batchSize` per call of a batch processor, each call settled (committed,
 * dead-lettered or held) before the next. It stops at once, without touching the broker again for
 * the rest of the batch, when the consumer stops, the partition was seeked or held, its
 * generation ended (rebalance, crash) or the group refused a commit or heartbeat; the refusal is
 * rethrown so kafkajs rejoins right away instead of at its next heartbeat.
 *
 * Kafka has no redelivery flag, so the runner marks `redelivered` itself: a process that died (out
 * of memory, a native crash, a kill) had at most one call per partition in flight, starting at the
 * partition's committed offset, and that is where the partition's next owner starts. So the first
 * call's worth of records (`batchSize` for a batch processor, 1 otherwise) of every partition in
 * every group generation, the very first included, is handed over `redelivered`: core counts their
 * attempts before they run, and a record that kills the process every time is dead-lettered after
 * `maxAttempts` deaths. A generation that ends before that call settled marks its replay again in
 * the next one. A marked call that ends in a hold marks its replay too: the held record's attempt
 * may have ended without running or without being counted (a database outage, a lock held by the
 * dead process's transaction), so it still owes its counted run. The replay of a hold in an
 * unmarked call is not marked: nothing in it was in flight in a process that died.
 */
class BatchRunner {
  /**
   * Per partition (`topic\0partition`): the generation whose records are being marked, how many
   * more of them are, and whether its latest call carried marks.
   */
  private readonly marking = new Map<string, { generation: number; left: number; lastMarked: boolean }>();

  constructor(
    private readonly deps: RuntimeDeps,
    private readonly group: GroupMembership,
    private readonly holds: PartitionHolds,
    private readonly settlement: Settlement,
  ) {}

  async run(fetched: FetchedRecords): Promise<void> {
    const { topic, partition, messages } = fetched;
    if (!this.deps.taking() || messages.length === 0) return;
    // Fenced: every fetched record of this generation will be refused; let kafkajs rejoin.
    if (this.group.fenced !== undefined) throw this.group.fenced;
    const generation = this.group.generation;
    const admitted = this.holds.admit(topic, partition, messages);
    if (admitted === undefined) return;
    const step = this.deps.processor.kind === 'batch' ? this.deps.settings.batchSize : 1;
    const receivedAt = new Date();
    for (let from = admitted.start; from < messages.length; from += step) {
      if (!this.live(generation, fetched)) return;
      const records = messages.slice(from, from + step);
      const marked = this.toMark(topic, partition, generation, records.length, step, from === admitted.start && admitted.hold !== undefined);
      const at = { topic, partition, generation, resolveOffset: fetched.resolveOffset, isRunning: fetched.isRunning };
      const settled = (async () => {
        const outcomes = await this.outcomesOf(topic, partition, records, receivedAt, marked, () => this.heartbeat(fetched));
        const chunk = records.map((record, i) => ({ record, receivedAt, outcome: outcomes[i]! }));
        return this.settlement.settle(at, chunk);
      })().catch((error: unknown) => this.unexpected(at, records, error));
      // Each record counts as in flight (for status() and stop()) until its call settled: one task for the chunk, counted per record.
      this.deps.inFlight.track(settled.then(noop, noop), records.length);
      if (!(await settled)) return;
      this.holds.release(topic, partition, admitted.hold);
      if (from + step < messages.length) await this.heartbeat(fetched);
    }
  }

  /**
   * How many of a chunk's first records to hand over `redelivered` (see the class comment): the
   * partition's first `step` records of this generation, counted across fetches (a fetch may hold
   * fewer records than the call that was in flight when a process died), and `step` again from the
   * held record when the chunk replays a hold of a marked call.
   */
  private toMark(topic: string, partition: number, generation: number, size: number, step: number, replaysHold: boolean): number {
    const key = `${topic}\u0000${partition}`;
    let marking = this.marking.get(key);
    if (marking === undefined || marking.generation !== generation) {
      marking = { generation, left: step, lastMarked: false };
      this.marking.set(key, marking);
    } else if (replaysHold && marking.lastMarked) {
      // Calls of a partition run one after the other: its latest call is the one that was held.
      marking.left = step;
    }
    const marked = Math.min(marking.left, size);
    marking.left -= marked;
    marking.lastMarked = marked > 0;
    return marked;
  }

  /**
   * Processing or settling a chunk threw where nothing should (a bug in a middleware, a hook or
   * inboxed): like a dead-letter that failed to send, the partition is held at the chunk's first
   * record (whatever of it was already done comes back as a duplicate) and runs again after
   * `retryBackoff`, reported; a throw there would make kafkajs crash and restart the consumer, again
   * and again. The group's refusal of a commit is rethrown, as ever, so kafkajs rejoins.
   */
  private unexpected(at: { topic: string; partition: number; generation: number }, records: KafkaRecord[], error: unknown): false {
    if (this.group.fenced !== undefined || groupRefusal(error) !== undefined) throw error;
    if (!this.settlement.current(at)) return false; // its generation is over: the records run again after the rejoin
    const offset = records[0]!.offset;
    try {
      this.holds.hold(at.topic, at.partition, BigInt(offset), undefined);
    } catch {
      throw error; // cannot hold it: kafkajs restarts from the committed offset instead
    }
    try {
      this.deps.events.emit(
        'error',
        kafkaError(
          KafkaErrorCodes.KAFKA_SETTLE_FAILED,
          `processing or settling ${records.length} record(s) of ${at.topic}/${at.partition} from offset ${offset} threw unexpectedly; the partition is held there and they run again after a backoff (as duplicates where already done)`,
          error,
          { messageIds: [], details: { topic: at.topic, partition: at.partition, offset } },
        ),
      );
    } catch {
      // Reporting must not undo the hold by crashing the consumer.
    }
    return false;
  }

  /** True while the batch may go on: taking records, same generation, not fenced, kafkajs running and the partition not seeked. */
  private live(generation: number, fetched: FetchedRecords): boolean {
    return this.deps.taking() && this.group.current(generation) && (fetched.isRunning?.() ?? true) && !(fetched.isStale?.() ?? false);
  }

  /**
   * Outcomes for a chunk, index-aligned with `records`: the adapter's own for records without an
   * id or with an undecodable value (reported to the processor's observers), the processor's for
   * the rest, in one call. The first `marked` records are handed over `redelivered`.
   */
  private async outcomesOf(
    topic: string,
    partition: number,
    records: KafkaRecord[],
    receivedAt: Date,
    marked: number,
    heartbeat: () => Promise<void>,
  ): Promise<InboxOutcome[]> {
    const { processor, settings, events } = this.deps;
    const outcomes: InboxOutcome[] = new Array(records.length);
    const messages: InboxMessage[] = [];
    const positions: number[] = [];
    // Per chunk, not per record: the source string every message of the partition shares.
    const source = sourceOf(topic, partition);
    for (let i = 0; i < records.length; i++) {
      const mapped = toInboxMessage({ topic, partition, message: records[i]! }, settings.mapping, processor.consumer, receivedAt, source, i < marked);
      if (mapped.ok) {
        messages.push(mapped.message);
        positions.push(i);
      } else {
        outcomes[i] = mapped.outcome;
        this.observe(mapped.outcome);
      }
    }
    if (messages.length === 0) return outcomes;
    // A batch processor can take several transactions for one call (a failing batch split in halves,
    // redeliveries that failed or died before run one at a time), longer than a session on a slow
    // handler: it heartbeats between them (kafkajs sends one only once `heartbeatInterval` passed).
    // A heartbeat the group refuses stops the call; the refusal is rethrown here, nothing is committed.
    let refused: { error: unknown } | undefined;
    const beat = async () => {
      try {
        await heartbeat();
      } catch (error) {
        refused = { error };
        throw error;
      }
    };
    const results = await callProcessor(processor, messages, { signal: this.deps.signal(), heartbeat: beat }, events, topic);
    if (refused !== undefined) throw refused.error;
    for (let j = 0; j < results.length; j++) outcomes[positions[j]!] = results[j]!;
    return outcomes;
  }

  /** Hands an outcome the adapter decided itself to the processor's observers (the outcome recorder, metrics); one that throws is logged. */
  private observe(outcome: InboxOutcome): void {
    const { processor, events } = this.deps;
    if (typeof processor.observe !== 'function') return;
    try {
      processor.observe(outcome);
    } catch (error) {
      events.logger.error({ err: error, messageId: outcome.messageId }, `processor.observe threw: ${describeError(error)}`);
    }
  }

  /** Heartbeats between chunks; a refusal fences the member, and any failure ends the batch (kafkajs handles it). */
  private async heartbeat(fetched: FetchedRecords): Promise<void> {
    try {
      await fetched.heartbeat?.();
    } catch (error) {
      const refusal = groupRefusal(error);
      if (refusal !== undefined) this.group.fence(refusal);
      throw error;
    }
  }
}
