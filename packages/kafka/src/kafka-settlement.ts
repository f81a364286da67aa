import type { AnyInboxProcessor, InboxOutcome } from '@inboxed/core';
import { actionFor, type ConsumerEventEmitter, recordDeadLetterOf, redeliverAfterMs } from '@inboxed/core/adapter';
import { deadLetterTopicFor, sendDeadLetters, type DeadLetterTopicOption } from './kafka-dead-letter.js';
import { groupRefusal, KafkaErrorCodes, kafkaError } from './kafka-errors.js';
import type { GroupMembership } from './kafka-group.js';
import type { PartitionHolds } from './kafka-holds.js';
import type { KafkaConsumerLike, KafkaProducerLike, KafkaRecord } from './kafka-types.js';

/** A record handed to settlement with its outcome. */
export interface SettledRecord {
  record: KafkaRecord;
  /** When the batch holding it was fetched: the start of its delivery timing. */
  receivedAt: Date;
  outcome: InboxOutcome;
}

/** The partition a chunk belongs to, and the group generation its work started under. */
export interface ChunkPosition {
  topic: string;
  partition: number;
  generation: number;
  /** kafkajs `resolveOffset` (eachBatch): tells kafkajs the fetch position moved past committed records. */
  resolveOffset?(offset: string): void;
  /** kafkajs `isRunning` (eachBatch): once false, kafkajs skips commits without saying so (it is stopping or crashed). */
  isRunning?(): boolean;
}

/** What settlement acts with. */
export interface SettlementDeps {
  consumer: KafkaConsumerLike;
  producer: KafkaProducerLike;
  events: ConsumerEventEmitter;
  /** The processor, whose `recordDeadLetter` puts every dead-letter on record before its copy is produced. */
  processor: AnyInboxProcessor;
  group: GroupMembership;
  holds: PartitionHolds;
  deadLetterTopic: DeadLetterTopicOption | undefined;
  /** The consumer group, for the `x-inboxed-group-id` dead-letter header. */
  groupId: string | undefined;
  beforeSettle: ((outcome: InboxOutcome) => void | Promise<void>) | undefined;
  /** False once the consumer was closed (after stop, or abandoned at `stopTimeoutMs`): nothing settles any more. */
  open(): boolean;
}

/**
 * Settles a chunk of one partition's records in offset order: the prefix of final outcomes
 * (`ack`, or `dead-letter` once the dead-letter copy is acknowledged) is committed as one offset;
 * the first `retry` or `busy` (leased mode: another worker's lease, "not now") holds the partition
 * at its record until its `retryAfterMs`; neither is ever committed past nor dead-lettered.
 * Nothing is dead-lettered or committed for work whose generation is over or whose partition
 * moved to another member; a commit the group refuses fences the member (see
 * {@link GroupMembership.fence}) and is rethrown, so the caller stops at once and kafkajs rejoins.
 */
export class Settlement {
  constructor(private readonly deps: SettlementDeps) {}

  /** Returns true when the whole chunk settled and the partition may go on with its next records. */
  async settle(at: ChunkPosition, chunk: SettledRecord[]): Promise<boolean> {
    const { deps } = this;
    let final = 0;
    while (final < chunk.length && actionFor(chunk[final]!.outcome.status) !== 'retry') final++;
    if (!this.current(at)) return false;
    if (deps.beforeSettle !== undefined) {
      for (const { outcome } of chunk.slice(0, final + 1)) await deps.beforeSettle(outcome);
      if (!this.current(at)) return false;
    }
    let settled = final;
    const dead = chunk.slice(0, final).filter((entry) => actionFor(entry.outcome.status) === 'dead-letter');
    let destination: string | undefined;
    if (dead.length > 0) {
      destination = await this.deadLetter(at, dead);
      if (destination === undefined) settled = chunk.indexOf(dead[0]!);
    }
    // Whatever happened meanwhile (a rebalance, a stop), nothing of a past generation commits or holds.
    if (!this.current(at)) return false;
    if (settled > 0) {
      const last = chunk[settled - 1]!.record;
      if (!(await this.commit(at, last.offset, chunk.slice(0, settled)))) {
        if (this.current(at)) deps.holds.hold(at.topic, at.partition, BigInt(chunk[0]!.record.offset), undefined);
        return false;
      }
      // A kafkajs consumer that stopped running (a crash) returns from commitOffsets without committing.
      if (at.isRunning?.() === false) return false;
      at.resolveOffset?.(last.offset);
      for (const { outcome, receivedAt } of chunk.slice(0, settled)) deps.events.emitOutcome(outcome, receivedAt, destination);
    }
    if (settled === chunk.length) return true;
    if (!this.current(at)) return false;
    const held = chunk[settled]!;
    // `retry` and `busy` carry their own delay (`busy`: the other worker's lease); a dead-letter that
    // failed to send does not, and is held for `retryBackoff`.
    const redeliverIn = redeliverAfterMs(held.outcome);
    deps.holds.hold(at.topic, at.partition, BigInt(held.record.offset), redeliverIn);
    // The `retry` or `busy` event; a held dead-letter already had its `error` event.
    if (redeliverIn !== undefined) deps.events.emitOutcome(held.outcome, held.receivedAt);
    return false;
  }

  /** True while work of `at` may still reach the broker. */
  current(at: ChunkPosition): boolean {
    return this.deps.open() && this.deps.group.current(at.generation) && this.deps.group.owns(at.topic, at.partition);
  }

  /**
   * Records the dead-letters in the database, then produces their copies (acks -1, awaited) to the
   * dead-letter topic, which it returns. `undefined` when any step failed, the `deadLetterTopic`
   * function included: the partition is then held at the first of them, and the failure reported.
   */
  private async deadLetter(at: ChunkPosition, dead: SettledRecord[]): Promise<string | undefined> {
    const { deps } = this;
    const failed = (cause: unknown, what: string) => {
      deps.events.emit(
        'error',
        kafkaError(
          KafkaErrorCodes.KAFKA_DEAD_LETTER_FAILED,
          `${what} for ${dead.length} record(s) from ${at.topic}/${at.partition} failed; the partition is held and retried`,
          cause,
          {
            messageIds: dead.map((d) => d.outcome.messageId),
            details: { topic: at.topic, partition: at.partition, offsets: dead.map((d) => d.record.offset) },
          },
        ),
      );
      return undefined;
    };
    let topic: string;
    try {
      topic = deadLetterTopicFor(deps.deadLetterTopic, at.topic);
    } catch (cause) {
      return failed(cause, 'the deadLetterTopic option threw: choosing the dead-letter topic');
    }
    const destination = `kafka:${topic}`;
    for (const { outcome } of dead) {
      const notRecorded = await recordDeadLetterOf(deps.processor, outcome, { destination, source: `kafka:${at.topic}/${at.partition}` });
      if (notRecorded !== undefined) {
        deps.events.emit('error', notRecorded);
        return undefined;
      }
    }
    try {
      const source = { topic: at.topic, partition: at.partition, groupId: deps.groupId };
      await sendDeadLetters(deps.producer, topic, source, dead);
      return topic;
    } catch (cause) {
      return failed(cause, `producing the dead-letter records to ${topic}`);
    }
  }

  /**
   * Commits `offset + 1`. False when that failed for a reason other than the group's refusal (the
   * partition is then held and its records replayed as duplicates). A refusal fences the member
   * and is thrown.
   */
  private async commit(at: ChunkPosition, offset: string, records: SettledRecord[]): Promise<boolean> {
    const { deps } = this;
    const next = (BigInt(offset) + 1n).toString();
    try {
      await deps.consumer.commitOffsets([{ topic: at.topic, partition: at.partition, offset: next }]);
      return true;
    } catch (cause) {
      const refusal = groupRefusal(cause);
      deps.events.emit(
        'error',
        kafkaError(
          KafkaErrorCodes.KAFKA_COMMIT_FAILED,
          refusal !== undefined
            ? `the group refused the commit of ${at.topic}/${at.partition} offset ${next}; its fetched records are dropped and replayed as duplicates after the rejoin`
            : `committing ${at.topic}/${at.partition} offset ${next} failed; the partition is held and its records replayed as duplicates`,
          cause,
          {
            messageIds: records.map((r) => r.outcome.messageId),
            details: { topic: at.topic, partition: at.partition, offset: next, refused: refusal !== undefined },
          },
        ),
      );
      if (refusal === undefined) return false;
      deps.group.fence(refusal);
      throw refusal;
    }
  }
}
