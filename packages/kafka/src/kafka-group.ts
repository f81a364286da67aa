import type { KafkaConsumerLike } from './kafka-types.js';

/** What the membership reports besides its own state. */
export interface GroupListeners {
  /** The member (re)joined the group with this assignment. */
  joined?(assignment: Map<string, Set<number>>): void;
  /** kafkajs crashed; `restart` says whether kafkajs restarts the consumer itself. */
  crashed?(error: unknown, restart: boolean): void;
}

/**
 * This member's standing in its consumer group, followed through kafkajs instrumentation events
 * (CONNECT, GROUP_JOIN, REBALANCING, CRASH, STOP, DISCONNECT) and through the refusals the group
 * answers commits and heartbeats with.
 *
 * `generation` is bumped on every join, rebalance, crash, stop and refusal: work started under an
 * older one never settles. After a refusal the member is `fenced` until it rejoins: nothing of the
 * old generation may be processed, dead-lettered or committed any more.
 */
export class GroupMembership {
  generation = 0;
  /** The broker's refusal that fenced this member, until the next join. */
  fenced: Error | undefined;
  /** Connected to the brokers: CONNECT (or a join) seen, and no DISCONNECT or CRASH since. */
  connected = false;
  /** In the group: joined, and not crashed, stopped or disconnected since. */
  member = false;
  private assignment: Map<string, Set<number>> | undefined;
  private readonly unsubscribe: Array<() => void>;

  constructor(consumer: KafkaConsumerLike, listeners: GroupListeners = {}) {
    const { events } = consumer;
    const leave = () => {
      this.generation++;
      this.member = false;
    };
    this.unsubscribe = [
      consumer.on(events.CONNECT, () => {
        this.connected = true;
      }),
      consumer.on(events.GROUP_JOIN, (event) => {
        const assigned = (event.payload?.memberAssignment ?? {}) as Record<string, number[]>;
        this.generation++;
        this.fenced = undefined;
        this.member = true;
        this.connected = true;
        this.assignment = new Map(Object.entries(assigned).map(([topic, partitions]) => [topic, new Set(partitions)]));
        listeners.joined?.(this.assignment);
      }),
      consumer.on(events.REBALANCING, () => void this.generation++),
      consumer.on(events.CRASH, (event) => {
        leave();
        this.connected = false;
        listeners.crashed?.(event.payload?.error, event.payload?.restart === true);
      }),
      consumer.on(events.STOP, leave),
      consumer.on(events.DISCONNECT, () => {
        leave();
        this.connected = false;
      }),
    ];
  }

  /** The group refused this member's work: stop everything of the current generation until it rejoins. */
  fence(refusal: Error): void {
    if (this.fenced !== undefined) return;
    this.fenced = refusal;
    this.generation++;
  }

  /** True while work started under `generation` may still settle. */
  current(generation: number): boolean {
    return generation === this.generation && this.fenced === undefined;
  }

  /** True when the last join assigned this partition to this member (or no join was seen yet: a consumer run by you). */
  owns(topic: string, partition: number): boolean {
    return this.assignment === undefined || (this.assignment.get(topic)?.has(partition) ?? false);
  }

  /** The partitions of the last join. */
  assigned(): Array<{ topic: string; partition: number }> {
    return [...(this.assignment ?? new Map<string, Set<number>>())].flatMap(([topic, partitions]) =>
      [...partitions].map((partition) => ({ topic, partition })),
    );
  }

  /** Stops following the consumer's events. */
  close(): void {
    this.generation++;
    for (const off of this.unsubscribe.splice(0)) off();
  }
}
