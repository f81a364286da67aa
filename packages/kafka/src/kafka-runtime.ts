import {
  actionFor,
  adapterDeadLetter,
  backoffDelay,
  type ConsumerEventEmitter,
  InFlight,
  InboxError,
  InboxErrorCodes,
  UNPARSEABLE_BODY_REASON,
  type AnyInboxProcessor,
  type BackoffOptions,
  type InboxMessage,
  type InboxOutcome,
} from '@inboxed/core';
import { deadLetterRecord, deadLetterTopicFor, type DeadLetterTopicOption } from './kafka-dead-letter.js';
import { KafkaErrorCodes, kafkaError } from './kafka-errors.js';
import { toInboxMessage, type MappedRecord, type MessageIdExtractor, type MessageMappingOptions } from './kafka-message.js';
import type { KafkaConsumerLike, KafkaOutgoingRecord, KafkaProducerLike, KafkaRecord } from './kafka-types.js';

/** Options shared by `createKafkaConsumer` and the low-level `eachMessage`/`eachBatch` handlers. */
export interface KafkaProcessingOptions {
  /** Header carrying the producer's message id. Default `'message-id'`. */
  messageIdHeader?: string;
  /** Your own id extraction (e.g. from the key or the JSON value); wins over the header. Return `undefined` to fall back. */
  extractMessageId?: MessageIdExtractor;
  /**
   * When no id is found: `'record'` (default) uses `topic/partition/offset`, stable across
   * redeliveries of that record (rebalances, crashes) but not across a producer writing the same
   * message twice; `'none'` dead-letters such records with reason `missing-message-id`.
   */
  messageIdFallback?: 'record' | 'none';
  /** Value decoding: `'json'` (default; unparseable values are dead-lettered), `'content-type'` (JSON only when the `content-type` header says so) or `'raw'` (Buffer). */
  payload?: 'json' | 'content-type' | 'raw';
  /** Dead-letter topic: a name, or a function of the source topic. Default `<topic>.dlq`. */
  deadLetterTopic?: DeadLetterTopicOption;
  /**
   * Backoff for holds the processor did not time itself: a dead-letter record that could not be
   * produced. (A `retry` outcome carries its own `retryAfterMs`, set by `withInbox`'s `backoff`.)
   * Default 1 s doubling to 30 s, full jitter.
   */
  retryBackoff?: BackoffOptions;
  /** Most messages handed to one processor call (one database transaction) in batch mode. Default 500. */
  batchSize?: number;
  /** How long `stop()` waits for in-flight work before abandoning it (uncommitted). Default 30000 ms. */
  stopTimeoutMs?: number;
  /**
   * @internal Test hook: runs after a chunk's outcomes are final (database committed, dead-letters
   * acked) and before its offset is committed. Crash tests kill the process here.
   */
  beforeCommit?: (info: { topic: string; partition: number; offset: string; outcomes: InboxOutcome[] }) => void | Promise<void>;
}

/** What the runtime needs besides the options. */
export interface KafkaRuntimeDeps {
  processor: AnyInboxProcessor;
  consumer: KafkaConsumerLike;
  producer: KafkaProducerLike;
  events: ConsumerEventEmitter;
  /** The consumer group, for the `x-inboxed-group-id` dead-letter header. */
  groupId?: string;
  /** Called when kafkajs crashed and will not restart the consumer itself. */
  onFatalCrash?: (error: unknown) => void;
}

/** A partition held at a failing offset until its backoff ends. */
interface Hold {
  offset: bigint;
  attempts: number;
  timer: NodeJS.Timeout | undefined;
  /** Seeks re-issued because a fetch came back past the held offset. */
  reseeks: number;
}

interface Slot {
  record: KafkaRecord;
  mapped: MappedRecord;
}

const DEFAULT_RETRY_BACKOFF: BackoffOptions = { baseDelayMs: 1000, maxDelayMs: 30_000, jitter: 'full' };

const key = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/**
 * The engine behind both handler styles. Per partition it processes records in offset order,
 * commits `offset + 1` only for a prefix of records whose outcome is final, holds a partition at
 * its first `retry` (pause, seek back, resume after the backoff) and produces dead-letters
 * before committing past them. Every commit is checked against the current group generation and
 * assignment, so work finishing after a rebalance never moves the new owner's offsets.
 */
export class KafkaRuntime {
  private readonly mapping: MessageMappingOptions;
  private readonly holds = new Map<string, Hold>();
  private readonly inFlight = new InFlight();
  private readonly unsubscribe: Array<() => void> = [];
  /** Bumped on every rebalance, join and crash: work started under an older epoch never commits. */
  private epoch = 0;
  /** Assigned partitions per topic from the last group join; `undefined` until the first join is seen. */
  private assignment: Map<string, Set<number>> | undefined;
  private crashed = false;
  private restarts = 0;
  private stopping = false;
  private closed = false;
  readonly batchSize: number;
  readonly stopTimeoutMs: number;

  constructor(
    private readonly deps: KafkaRuntimeDeps,
    private readonly options: KafkaProcessingOptions = {},
  ) {
    this.mapping = {
      messageIdHeader: options.messageIdHeader ?? 'message-id',
      extractMessageId: options.extractMessageId,
      messageIdFallback: options.messageIdFallback ?? 'record',
      payload: options.payload ?? 'json',
    };
    this.batchSize = options.batchSize ?? 500;
    this.stopTimeoutMs = options.stopTimeoutMs ?? 30_000;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1) {
      throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, 'options.batchSize must be an integer >= 1');
    }
    const { consumer } = deps;
    this.unsubscribe.push(
      consumer.on(consumer.events.GROUP_JOIN, (event) => this.onGroupJoin(event.payload?.memberAssignment ?? {})),
      consumer.on(consumer.events.REBALANCING, () => void this.epoch++),
      consumer.on(consumer.events.CRASH, (event) => this.onCrash(event.payload?.error, event.payload?.restart === true)),
    );
  }

  /** `eachMessage` for `consumer.run()`. */
  readonly eachMessage = async (payload: { topic: string; partition: number; message: KafkaRecord }): Promise<void> => {
    await this.inFlight.track(this.process(payload.topic, payload.partition, [payload.message], undefined));
  };

  /** `eachBatch` for `consumer.run({ eachBatchAutoResolve: false })`. */
  readonly eachBatch = async (payload: {
    batch: { topic: string; partition: number; messages: KafkaRecord[] };
    resolveOffset(offset: string): void;
    heartbeat(): Promise<void>;
    isRunning(): boolean;
    isStale(): boolean;
  }): Promise<void> => {
    const { batch } = payload;
    await this.inFlight.track(this.process(batch.topic, batch.partition, batch.messages, payload));
  };

  /** Subscribes to consumer events (`message_processed`, `duplicate`, `retry`, `dead_letter`, `error`, `reconnect`). */
  on: ConsumerEventEmitter['on'] = (event, listener) => this.deps.events.on(event, listener);

  /** Stops taking new records, waits (bounded) for in-flight work, cancels pending resumes. */
  async quiesce(): Promise<number> {
    this.stopping = true;
    for (const hold of this.holds.values()) clearTimeout(hold.timer);
    this.holds.clear();
    const left = await this.inFlight.drain(this.stopTimeoutMs);
    if (left > 0) {
      this.deps.events.emit(
        'error',
        new InboxError(
          KafkaErrorCodes.KAFKA_STOP_TIMEOUT,
          `stop(): ${left} in-flight batch(es) still running after ${this.stopTimeoutMs} ms; abandoned without committing their offsets`,
          {
            details: { inFlight: left },
          },
        ),
      );
    }
    return left;
  }

  /** Detaches from the consumer; nothing commits afterwards. */
  close(): void {
    this.stopping = true;
    this.closed = true;
    for (const hold of this.holds.values()) clearTimeout(hold.timer);
    this.holds.clear();
    for (const off of this.unsubscribe.splice(0)) off();
  }

  private onGroupJoin(memberAssignment: Record<string, number[]>): void {
    this.epoch++;
    this.assignment = new Map(Object.entries(memberAssignment).map(([topic, partitions]) => [topic, new Set(partitions)]));
    // A join starts every assigned partition afresh from its committed offset, which never lies
    // past a held record: the hold's seek and pause are moot, so release them (the record is
    // simply retried now, ahead of its backoff).
    for (const [holdKey, hold] of this.holds) {
      clearTimeout(hold.timer);
      this.holds.delete(holdKey);
    }
    if (this.crashed) {
      this.crashed = false;
      this.deps.events.emit('reconnect', { attempt: ++this.restarts, delayMs: 0 });
    }
  }

  private onCrash(error: unknown, restart: boolean): void {
    this.epoch++;
    this.crashed = restart;
    this.deps.events.emit('error', kafkaError(KafkaErrorCodes.KAFKA_CONSUMER_CRASHED, 'the kafkajs consumer crashed', error, { details: { restart } }));
    if (!restart && !this.stopping) this.deps.onFatalCrash?.(error);
  }

  private owns(topic: string, partition: number): boolean {
    return this.assignment === undefined || (this.assignment.get(topic)?.has(partition) ?? false);
  }

  /**
   * Processes one partition's records in order. `batch` is the kafkajs eachBatch payload (or
   * undefined for eachMessage): records are then handed over in chunks of `batchSize`, with
   * heartbeats and commits between chunks.
   */
  private async process(
    topic: string,
    partition: number,
    records: KafkaRecord[],
    batch: { resolveOffset(offset: string): void; heartbeat(): Promise<void>; isRunning(): boolean; isStale(): boolean } | undefined,
  ): Promise<void> {
    if (this.stopping || records.length === 0) return;
    const epoch = this.epoch;
    const held = this.holds.get(key(topic, partition));
    let start = 0;
    if (held !== undefined) {
      if (held.timer !== undefined) {
        // Records fetched before the pause took effect: not before the held record. Seek again, so
        // the held record is what comes next once the partition resumes.
        this.deps.consumer.seek({ topic, partition, offset: held.offset.toString() });
        return;
      }
      while (start < records.length && BigInt(records[start]!.offset) < held.offset) start++;
      if (start < records.length && BigInt(records[start]!.offset) > held.offset && held.reseeks < 3) {
        // The fetch skipped past the held record (a seek lost to a concurrent fetch): go back
        // rather than apply later records first. Bounded, in case retention deleted the record.
        held.reseeks++;
        this.deps.consumer.seek({ topic, partition, offset: held.offset.toString() });
        return;
      }
    }
    const step = batch === undefined ? records.length : this.batchSize;
    for (let from = start; from < records.length; from += step) {
      if (this.stopping || epoch !== this.epoch || (batch !== undefined && (!batch.isRunning() || batch.isStale()))) return;
      const chunk = records.slice(from, from + step);
      const stoppedAt = await this.processChunk(topic, partition, chunk, epoch, batch);
      if (stoppedAt !== undefined) return;
      // The held record is final now: the hold (and its attempt count) is done.
      if (held !== undefined && this.holds.get(key(topic, partition)) === held) this.holds.delete(key(topic, partition));
      if (batch !== undefined && from + step < records.length) await batch.heartbeat();
    }
  }

  /** One chunk: one processor call (batch processor) or one call per record; returns the held offset if it stopped. */
  private async processChunk(
    topic: string,
    partition: number,
    records: KafkaRecord[],
    epoch: number,
    batch: { resolveOffset(offset: string): void; heartbeat(): Promise<void> } | undefined,
  ): Promise<bigint | undefined> {
    const slots: Slot[] = records.map((record) => ({ record, mapped: toInboxMessage(record, { topic, partition }, this.mapping) }));
    const interrupted: { error?: unknown } = {};
    const outcomes = await this.outcomesOf(slots, batch, interrupted);

    // The final prefix: everything before the first `retry` (or before the first record whose
    // outcome is missing because processing stopped there).
    let prefix = 0;
    while (prefix < slots.length && outcomes[prefix] !== undefined && actionFor(outcomes[prefix]!.status) !== 'retry') prefix++;

    // Dead-letters inside the prefix must be acked by Kafka before any offset moves past them.
    const dlqIndexes = [];
    for (let i = 0; i < prefix; i++) if (actionFor(outcomes[i]!.status) === 'dead-letter') dlqIndexes.push(i);
    if (dlqIndexes.length > 0) {
      const failed = await this.produceDeadLetters(
        topic,
        partition,
        dlqIndexes.map((i) => ({ record: slots[i]!.record, outcome: outcomes[i]! })),
      );
      if (failed) prefix = dlqIndexes[0]!;
    }

    for (let i = 0; i < prefix; i++) {
      const outcome = outcomes[i]!;
      this.deps.events.emitOutcome(outcome, deadLetterTopicFor(this.options.deadLetterTopic, topic));
    }
    if (prefix > 0) {
      const last = slots[prefix - 1]!.record;
      await this.commit(topic, partition, last.offset, epoch, outcomes.slice(0, prefix) as InboxOutcome[]);
      batch?.resolveOffset(last.offset);
    }
    // A heartbeat that failed mid-chunk (rebalance): the final prefix is committed above, now let
    // kafkajs rejoin; the rest of the chunk is replayed by whoever owns the partition next.
    if (interrupted.error !== undefined) throw interrupted.error;
    if (prefix === slots.length) return undefined;

    const failing = slots[prefix]!.record;
    const outcome = outcomes[prefix];
    if (outcome !== undefined && outcome.status === 'retry') this.deps.events.emitOutcome(outcome);
    this.hold(topic, partition, BigInt(failing.offset), outcome?.status === 'retry' ? outcome.retryAfterMs : undefined);
    return BigInt(failing.offset);
  }

  /**
   * Outcomes for a chunk, index-aligned with `slots`. Records that could not be decoded are
   * dead-lettered by the adapter itself. With a per-message processor, processing stops at the
   * first `retry`: later records of the partition must not take effect before it.
   */
  private async outcomesOf(
    slots: Slot[],
    batch: { heartbeat(): Promise<void> } | undefined,
    interrupted: { error?: unknown },
  ): Promise<(InboxOutcome | undefined)[]> {
    const { processor } = this.deps;
    const outcomes: (InboxOutcome | undefined)[] = new Array(slots.length).fill(undefined);
    const undecodable = (slot: Slot & { mapped: { ok: false } }) =>
      adapterDeadLetter({ messageId: slot.mapped.messageId, consumer: processor.consumer, reason: UNPARSEABLE_BODY_REASON, error: slot.mapped.error });
    if (processor.kind === 'batch') {
      const messages: InboxMessage[] = [];
      const positions: number[] = [];
      slots.forEach((slot, i) => {
        if (slot.mapped.ok) {
          messages.push(slot.mapped.message);
          positions.push(i);
        } else {
          outcomes[i] = undecodable(slot as Slot & { mapped: { ok: false } });
        }
      });
      if (messages.length > 0) {
        const results = await this.guard(() => processor(messages), messages);
        for (const [j, outcome] of results.entries()) outcomes[positions[j]!] = outcome;
      }
      return outcomes;
    }
    for (const [i, slot] of slots.entries()) {
      if (!slot.mapped.ok) {
        outcomes[i] = undecodable(slot as Slot & { mapped: { ok: false } });
        continue;
      }
      const message = slot.mapped.message;
      const [outcome] = await this.guard(async () => [await processor(message)], [message]);
      outcomes[i] = outcome;
      if (outcome!.status === 'retry' || this.stopping) break;
      if (batch !== undefined && i < slots.length - 1) {
        try {
          await batch.heartbeat();
        } catch (error) {
          interrupted.error = error;
          break;
        }
      }
    }
    return outcomes;
  }

  /** Processors never throw by contract; should one anyway, its messages are retried, not lost. */
  private async guard(run: () => Promise<InboxOutcome[]>, messages: InboxMessage[]): Promise<InboxOutcome[]> {
    try {
      return await run();
    } catch (cause) {
      const error = new InboxError(InboxErrorCodes.HANDLER_FAILED, `the processor threw (it should resolve to an outcome): ${String(cause)}`, {
        cause,
        messageIds: messages.map((m) => String(m.id)),
      });
      this.deps.events.emit('error', error);
      const retryAfterMs = backoffDelay(1, this.options.retryBackoff ?? DEFAULT_RETRY_BACKOFF);
      return messages.map((m) => ({
        status: 'retry',
        messageId: String(m.id),
        consumer: this.deps.processor.consumer,
        reason: 'handler-failed',
        error,
        retryAfterMs,
      }));
    }
  }

  /** Produces dead-letters with an awaited ack (`acks: -1`). Returns true when that failed. */
  private async produceDeadLetters(topic: string, partition: number, entries: { record: KafkaRecord; outcome: InboxOutcome }[]): Promise<boolean> {
    const byTopic = new Map<string, KafkaOutgoingRecord[]>();
    const now = new Date();
    for (const { record, outcome } of entries) {
      const destination = deadLetterTopicFor(this.options.deadLetterTopic, topic);
      const list = byTopic.get(destination) ?? [];
      list.push(deadLetterRecord(record, { topic, partition, groupId: this.deps.groupId }, outcome, now));
      byTopic.set(destination, list);
    }
    try {
      for (const [destination, messages] of byTopic) await this.deps.producer.send({ topic: destination, messages, acks: -1 });
      return false;
    } catch (cause) {
      this.deps.events.emit(
        'error',
        kafkaError(
          KafkaErrorCodes.KAFKA_DEAD_LETTER_FAILED,
          `producing ${entries.length} dead-letter record(s) from ${topic}/${partition} failed; the partition is held and retried`,
          cause,
          {
            messageIds: entries.map((e) => e.outcome.messageId),
            details: { topic, partition, offsets: entries.map((e) => e.record.offset) },
          },
        ),
      );
      return true;
    }
  }

  /**
   * Commits `offset + 1`, unless the partition changed hands since the work started: then the new
   * owner replays those records and they resolve as `duplicate`.
   */
  private async commit(topic: string, partition: number, offset: string, epoch: number, outcomes: InboxOutcome[]): Promise<void> {
    if (this.closed || epoch !== this.epoch || !this.owns(topic, partition)) return;
    await this.options.beforeCommit?.({ topic, partition, offset, outcomes });
    if (this.closed || epoch !== this.epoch || !this.owns(topic, partition)) return;
    const next = (BigInt(offset) + 1n).toString();
    try {
      await this.deps.consumer.commitOffsets([{ topic, partition, offset: next }]);
    } catch (cause) {
      this.deps.events.emit(
        'error',
        kafkaError(
          KafkaErrorCodes.KAFKA_COMMIT_FAILED,
          `committing ${topic}/${partition} offset ${next} failed; those records will be replayed as duplicates`,
          cause,
          {
            messageIds: outcomes.map((o) => o.messageId),
            details: { topic, partition, offset: next },
          },
        ),
      );
    }
  }

  /** Pauses the partition at `offset`, seeks back to it, and resumes after the backoff. */
  private hold(topic: string, partition: number, offset: bigint, retryAfterMs: number | undefined): void {
    if (this.stopping) return;
    const holdKey = key(topic, partition);
    const previous = this.holds.get(holdKey);
    const attempts = previous !== undefined && previous.offset === offset ? previous.attempts + 1 : 1;
    clearTimeout(previous?.timer);
    const delay = retryAfterMs ?? backoffDelay(attempts, this.options.retryBackoff ?? DEFAULT_RETRY_BACKOFF);
    const { consumer } = this.deps;
    const hold: Hold = { offset, attempts, timer: undefined, reseeks: 0 };
    this.holds.set(holdKey, hold);
    consumer.pause([{ topic, partitions: [partition] }]);
    consumer.seek({ topic, partition, offset: offset.toString() });
    hold.timer = setTimeout(() => {
      hold.timer = undefined;
      if (this.stopping || this.holds.get(holdKey) !== hold) return;
      // Seek again: a join or a late fetch may have moved the position meanwhile.
      consumer.seek({ topic, partition, offset: offset.toString() });
      consumer.resume([{ topic, partitions: [partition] }]);
    }, delay);
  }
}
