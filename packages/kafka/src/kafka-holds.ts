import { backoffDelay, type BackoffOptions } from '@inboxed/core/adapter';
import type { KafkaConsumerLike, KafkaRecord } from './kafka-types.js';

/** A partition held at a record until its backoff ends. */
export interface Hold {
  offset: bigint;
  /** Holds in a row at this offset: the backoff attempt when no `retryAfterMs` is known. */
  attempts: number;
  timer: NodeJS.Timeout | undefined;
  /** Seeks re-issued because a fetch came back past the held offset. */
  reseeks: number;
}

const key = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/**
 * Per-partition retry holds, Kafka's way of redelivering later without reordering: the partition
 * is paused at the record that must run again, the consumer seeks back to it, and it resumes after
 * the backoff. Later records of that partition are neither processed nor committed meanwhile;
 * other partitions keep flowing.
 */
export class PartitionHolds {
  private readonly holds = new Map<string, Hold>();

  constructor(
    private readonly consumer: KafkaConsumerLike,
    private readonly backoff: BackoffOptions,
  ) {}

  /** True while the partition waits for a backoff to end. */
  isHeld(topic: string, partition: number): boolean {
    return this.holds.get(key(topic, partition))?.timer !== undefined;
  }

  /**
   * Where processing of a freshly fetched batch of the partition starts, with the hold it runs
   * under; `undefined` to skip the batch: records fetched before the pause took effect, or a fetch
   * that skipped past the held record (a seek lost to a concurrent fetch). Both seek back again,
   * so the held record is what comes next; the latter at most 3 times, in case retention deleted it.
   */
  admit(topic: string, partition: number, records: KafkaRecord[]): { start: number; hold: Hold | undefined } | undefined {
    const hold = this.holds.get(key(topic, partition));
    if (hold === undefined) return { start: 0, hold };
    if (hold.timer !== undefined) {
      this.consumer.seek({ topic, partition, offset: hold.offset.toString() });
      return undefined;
    }
    let start = 0;
    while (start < records.length && BigInt(records[start]!.offset) < hold.offset) start++;
    if (start < records.length && BigInt(records[start]!.offset) > hold.offset && hold.reseeks < 3) {
      hold.reseeks++;
      this.consumer.seek({ topic, partition, offset: hold.offset.toString() });
      return undefined;
    }
    return { start, hold };
  }

  /** The held record is final now: the hold (and its attempt count) is done. */
  release(topic: string, partition: number, hold: Hold | undefined): void {
    if (hold !== undefined && this.holds.get(key(topic, partition)) === hold) this.holds.delete(key(topic, partition));
  }

  /** Pauses the partition at `offset`, seeks back to it, and resumes after `retryAfterMs` (or the backoff of this hold's attempt). */
  hold(topic: string, partition: number, offset: bigint, retryAfterMs: number | undefined): void {
    const holdKey = key(topic, partition);
    const previous = this.holds.get(holdKey);
    const attempts = previous !== undefined && previous.offset === offset ? previous.attempts + 1 : 1;
    clearTimeout(previous?.timer);
    const hold: Hold = { offset, attempts, timer: undefined, reseeks: 0 };
    this.holds.set(holdKey, hold);
    const { consumer } = this;
    consumer.pause([{ topic, partitions: [partition] }]);
    consumer.seek({ topic, partition, offset: offset.toString() });
    hold.timer = setTimeout(() => {
      hold.timer = undefined;
      if (this.holds.get(holdKey) !== hold) return;
      // Seek again: a join or a late fetch may have moved the position meanwhile.
      consumer.seek({ topic, partition, offset: offset.toString() });
      consumer.resume([{ topic, partitions: [partition] }]);
    }, retryAfterMs ?? backoffDelay(attempts, this.backoff));
  }

  /**
   * After a join every assigned partition starts afresh from its committed offset, which never
   * lies past a held record: the holds are moot. Their records simply run again now, ahead of
   * their backoff.
   */
  releaseAll(): void {
    for (const [holdKey, hold] of this.holds) {
      clearTimeout(hold.timer);
      const [topic, partition] = holdKey.split('\u0000') as [string, string];
      this.consumer.resume([{ topic, partitions: [Number(partition)] }]);
    }
    this.holds.clear();
  }

  /** Stopping: no partition resumes any more. */
  cancelAll(): void {
    for (const hold of this.holds.values()) clearTimeout(hold.timer);
    this.holds.clear();
  }
}
