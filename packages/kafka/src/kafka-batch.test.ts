import { EventEmitter } from 'node:events';
import {
  InboxError,
  InboxErrorCodes,
  type InboxBatchProcessor,
  type InboxMessage,
  type InboxOutcome,
  type InboxProcessor,
  type ProcessOptions,
  OutcomeReasons,
} from '@inboxed/core';
import { ConsumerEventEmitter, InFlight } from '@inboxed/core/adapter';
import { describe, expect, it } from 'vitest';
import { attachRuntime } from './kafka-batch.js';
import { processingSettings } from './kafka-options.js';
import type { KafkaConsumerLike, KafkaOutgoingRecord, KafkaRecord } from './kafka-types.js';

/** A kafkajs protocol error as kafkajs' retrier rejects it: a non-retriable wrapper around the broker's error. */
function protocolError(type: string): Error {
  const broker = Object.assign(new Error(`broker says ${type}`), { name: 'KafkaJSProtocolError', type, retriable: false });
  return Object.assign(new Error(broker.message), { name: 'KafkaJSNonRetriableError', retriable: false, cause: broker });
}

/** A consumer that records what the adapter asks of it and emits kafkajs instrumentation events on demand. */
function fakeConsumer(refuseCommits: () => string | undefined) {
  const bus = new EventEmitter();
  const commits: string[] = [];
  const consumer: KafkaConsumerLike = {
    connect: async () => {},
    disconnect: async () => {},
    subscribe: async () => {},
    run: async () => {},
    stop: async () => {},
    async commitOffsets([entry]) {
      commits.push(`${entry!.partition}@${entry!.offset}`);
      const refusal = refuseCommits();
      if (refusal !== undefined) throw protocolError(refusal);
    },
    seek: () => {},
    pause: () => {},
    resume: () => {},
    on(name, listener) {
      bus.on(name, listener);
      return () => bus.off(name, listener);
    },
    events: { CONNECT: 'connect', DISCONNECT: 'disconnect', GROUP_JOIN: 'group_join', REBALANCING: 'rebalancing', CRASH: 'crash', STOP: 'stop' },
  };
  const join = (partitions: number[]) => bus.emit('group_join', { payload: { memberAssignment: { payments: partitions } } });
  return { consumer, commits, join };
}

const record = (offset: number, value: string): KafkaRecord => ({
  key: null,
  value: Buffer.from(value),
  offset: String(offset),
  timestamp: '0',
  headers: { 'message-id': `m-${offset}` },
});

describe('a member the group refuses', () => {
  it('stops its fetched records at the first refused commit: no further processing, dead-letters or commits until it rejoins', async () => {
    let refuse: string | undefined;
    const { consumer, commits, join } = fakeConsumer(() => refuse);
    const sent: KafkaOutgoingRecord[] = [];
    const producer = {
      connect: async () => {},
      disconnect: async () => {},
      send: async ({ messages }: { messages: KafkaOutgoingRecord[] }) => void sent.push(...messages),
    };
    const processed: string[] = [];
    const processor = Object.assign(
      async (message: InboxMessage): Promise<InboxOutcome> => {
        processed.push(message.id);
        if (message.id === 'm-2' && processed.length === 3) refuse = 'REBALANCE_IN_PROGRESS'; // the group starts rebalancing meanwhile
        return { status: 'processed', messageId: message.id, consumer: 'billing' };
      },
      { kind: 'single' as const, consumer: 'billing', checkTables: async () => {}, observe: () => {} },
    ) satisfies InboxProcessor;
    const events = new ConsumerEventEmitter();
    const errors: string[] = [];
    events.on('error', (error) => errors.push(`${error.code} refused=${String(error.details.refused)} ${String(error.details.errorType)}`));
    const runtime = attachRuntime({
      processor,
      consumer,
      producer,
      events,
      settings: processingSettings(processor, {}),
      groupId: 'g',
      inFlight: new InFlight(),
      taking: () => true,
      signal: () => undefined,
    });
    join([0]);
    // Records 0 and 1 settle; the group starts rebalancing while record 2 is processed, so its
    // commit is refused; 3-5 (two of them unparseable: dead-lettered by the adapter) must not be touched.
    const batch = [record(0, '{}'), record(1, '{}'), record(2, '{}'), record(3, '{not json'), record(4, '{}'), record(5, '{not json')];
    let heartbeats = 0;
    const running = runtime.run({ topic: 'payments', partition: 0, messages: batch, heartbeat: async () => void heartbeats++ });
    await expect(running).rejects.toMatchObject({ type: 'REBALANCE_IN_PROGRESS' });
    expect(processed).toEqual(['m-0', 'm-1', 'm-2']);
    expect(commits).toEqual(['0@1', '0@2', '0@3']);
    expect(heartbeats).toBe(2);
    expect(sent).toEqual([]);
    expect(errors).toEqual(['KAFKA_COMMIT_FAILED refused=true REBALANCE_IN_PROGRESS']);

    // Another batch of the same generation is refused at once: kafkajs rejoins.
    await expect(runtime.run({ topic: 'payments', partition: 0, messages: batch.slice(3) })).rejects.toMatchObject({ type: 'REBALANCE_IN_PROGRESS' });
    expect(processed).toHaveLength(3);

    // After the rejoin the replay is processed, dead-lettered and committed again.
    refuse = undefined;
    join([0]);
    await runtime.run({ topic: 'payments', partition: 0, messages: batch.slice(3) });
    expect(processed).toEqual(['m-0', 'm-1', 'm-2', 'm-4']);
    expect(sent.map((r) => String(r.headers?.['x-inboxed-original-offset']))).toEqual(['3', '5']);
    expect(commits.slice(3)).toEqual(['0@4', '0@5', '0@6']);
    runtime.close();
  });

  it('treats ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and NOT_COORDINATOR the same way, and other commit failures as a hold', async () => {
    for (const type of ['ILLEGAL_GENERATION', 'UNKNOWN_MEMBER_ID', 'NOT_COORDINATOR_FOR_GROUP', 'REQUEST_TIMED_OUT']) {
      const { consumer, commits, join } = fakeConsumer(() => type);
      const processor = Object.assign(async (message: InboxMessage): Promise<InboxOutcome> => ({ status: 'processed', messageId: message.id, consumer: 'c' }), {
        kind: 'single' as const,
        consumer: 'c',
        checkTables: async () => {},
        observe: () => {},
      }) satisfies InboxProcessor;
      const events = new ConsumerEventEmitter();
      events.on('error', () => {});
      const runtime = attachRuntime({
        processor,
        consumer,
        producer: { connect: async () => {}, disconnect: async () => {}, send: async () => {} },
        events,
        settings: processingSettings(processor, {}),
        groupId: undefined,
        inFlight: new InFlight(),
        taking: () => true,
        signal: () => undefined,
      });
      join([0]);
      const run = runtime.run({ topic: 'payments', partition: 0, messages: [record(0, '{}'), record(1, '{}')] });
      if (type === 'REQUEST_TIMED_OUT') {
        await run; // not a refusal: the partition is held at record 0 and replayed after a backoff
        expect(runtime.holds.isHeld('payments', 0)).toBe(true);
      } else {
        await expect(run).rejects.toMatchObject({ type });
        expect(runtime.group.fenced).toBeDefined();
      }
      expect(commits).toEqual(['0@1']);
      runtime.close();
    }
  });
});

describe('a busy outcome (leased mode: another worker holds the lease)', () => {
  it('batch processor: holds the partition at the busy record after committing the records before it, never dead-letters it, emits busy (not retry), and runs it again after retryAfterMs', async () => {
    const { consumer, commits, join } = fakeConsumer(() => undefined);
    const sent: KafkaOutgoingRecord[] = [];
    const producer = {
      connect: async () => {},
      disconnect: async () => {},
      send: async ({ messages }: { messages: KafkaOutgoingRecord[] }) => void sent.push(...messages),
    };
    let busy = true;
    const calls: string[][] = [];
    const processor = Object.assign(
      async (messages: readonly InboxMessage[]): Promise<InboxOutcome[]> => {
        calls.push(messages.map((m) => m.id));
        return messages.map(
          (m): InboxOutcome =>
            m.id === 'm-1' && busy
              ? { status: 'busy', reason: OutcomeReasons.LEASE_HELD, retryAfterMs: 30, messageId: m.id, consumer: 'billing' }
              : { status: 'processed', messageId: m.id, consumer: 'billing' },
        );
      },
      { kind: 'batch' as const, consumer: 'billing', checkTables: async () => {}, observe: () => {} },
    ) satisfies InboxBatchProcessor;
    const events = new ConsumerEventEmitter();
    const seen: string[] = [];
    events.on('message_processed', (outcome) => void seen.push(`message_processed:${outcome.messageId}`));
    events.on('retry', (outcome) => void seen.push(`retry:${outcome.messageId}`));
    events.on('busy', (outcome) => void seen.push(`busy:${outcome.messageId}`));
    events.on('dead_letter', (outcome) => void seen.push(`dead_letter:${outcome.messageId}`));
    events.on('error', (error) => void seen.push(`error:${error.code}`));
    const runtime = attachRuntime({
      processor,
      consumer,
      producer,
      events,
      settings: processingSettings(processor, { batchSize: 3 }),
      groupId: 'g',
      inFlight: new InFlight(),
      taking: () => true,
      signal: () => undefined,
    });
    join([0]);
    const batch = [record(0, '{}'), record(1, '{}'), record(2, '{}')];
    await runtime.run({ topic: 'payments', partition: 0, messages: batch });
    // m-0 is committed; m-1 is busy and m-2 (after it) is not committed although its outcome is final.
    expect(commits).toEqual(['0@1']);
    expect(seen).toEqual(['message_processed:m-0', 'busy:m-1']);
    expect(sent).toEqual([]);
    expect(runtime.holds.isHeld('payments', 0)).toBe(true);
    // A fetch that comes back while the partition is held runs nothing.
    await runtime.run({ topic: 'payments', partition: 0, messages: batch.slice(1) });
    expect(calls).toHaveLength(1);
    // After retryAfterMs the partition resumes at m-1.
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(runtime.holds.isHeld('payments', 0)).toBe(false);
    busy = false;
    await runtime.run({ topic: 'payments', partition: 0, messages: batch.slice(1) });
    expect(calls).toEqual([
      ['m-0', 'm-1', 'm-2'],
      ['m-1', 'm-2'],
    ]);
    expect(commits).toEqual(['0@1', '0@3']);
    expect(seen).toEqual(['message_processed:m-0', 'busy:m-1', 'message_processed:m-1', 'message_processed:m-2']);
    expect(sent).toEqual([]);
    runtime.close();
  });
});

describe('redelivered: the records that may have been in flight when a process died', () => {
  /** A runtime on a fake consumer whose processor records `id:redelivered` per message, per call. */
  function markingRuntime(
    options: {
      batchSize?: number;
      outcome?: (message: InboxMessage) => InboxOutcome | undefined;
      /** Runs inside each batch call before its outcomes, with the call's options (a core processor heartbeats between its transactions). */
      during?: (call: ProcessOptions | undefined) => Promise<void>;
    } = {},
  ) {
    const { consumer, commits, join } = fakeConsumer(() => undefined);
    const calls: string[][] = [];
    const decide = (m: InboxMessage): InboxOutcome => options.outcome?.(m) ?? { status: 'processed', messageId: m.id, consumer: 'billing' };
    const shared = { consumer: 'billing', checkTables: async () => {}, observe: () => {} };
    const processor =
      options.batchSize === undefined
        ? (Object.assign(
            async (message: InboxMessage): Promise<InboxOutcome> => {
              calls.push([`${message.id}:${message.redelivered === true}`]);
              return decide(message);
            },
            { kind: 'single' as const, ...shared },
          ) satisfies InboxProcessor)
        : (Object.assign(
            async (messages: readonly InboxMessage[], call?: ProcessOptions): Promise<InboxOutcome[]> => {
              calls.push(messages.map((m) => `${m.id}:${m.redelivered === true}`));
              await options.during?.(call);
              return messages.map(decide);
            },
            { kind: 'batch' as const, ...shared },
          ) satisfies InboxBatchProcessor);
    const events = new ConsumerEventEmitter();
    events.on('error', () => {});
    const runtime = attachRuntime({
      processor,
      consumer,
      producer: { connect: async () => {}, disconnect: async () => {}, send: async () => {} },
      events,
      settings: processingSettings(processor, options.batchSize === undefined ? {} : { batchSize: options.batchSize }),
      groupId: 'g',
      inFlight: new InFlight(),
      taking: () => true,
      signal: () => undefined,
    });
    const records = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => record(from + i, '{}'));
    return { runtime, calls, commits, join, records };
  }

  it('batch processor: the first batchSize records of each partition per generation, counted across fetches; none after', async () => {
    const { runtime, calls, join, records } = markingRuntime({ batchSize: 3 });
    join([0, 1]);
    // A first fetch shorter than batchSize: the partition's next fetch carries the rest of the marking.
    await runtime.run({ topic: 'payments', partition: 0, messages: records(0, 2) });
    await runtime.run({ topic: 'payments', partition: 0, messages: records(2, 6) });
    await runtime.run({ topic: 'payments', partition: 1, messages: records(0, 4) });
    expect(calls).toEqual([
      ['m-0:true', 'm-1:true'],
      ['m-2:true', 'm-3:false', 'm-4:false'],
      ['m-5:false'],
      ['m-0:true', 'm-1:true', 'm-2:true'],
      ['m-3:false'],
    ]);
    // A new generation (a rebalance that kept the partition): its first call is marked again.
    join([0]);
    await runtime.run({ topic: 'payments', partition: 0, messages: records(6, 10) });
    expect(calls.slice(5)).toEqual([['m-6:true', 'm-7:true', 'm-8:true'], ['m-9:false']]);
    runtime.close();
  });

  it("batch processor: the processor's heartbeat between its transactions is the fetch's, so a slow marked call keeps the member in the group", async () => {
    const { runtime, calls, commits, join, records } = markingRuntime({
      batchSize: 3,
      during: async (call) => {
        await call?.heartbeat?.();
        await call?.heartbeat?.();
      },
    });
    join([0]);
    const heartbeats: number[] = [];
    await runtime.run({ topic: 'payments', partition: 0, messages: records(0, 5), heartbeat: async () => void heartbeats.push(calls.length) });
    // Two inside each call, and one between the chunks.
    expect(heartbeats).toEqual([1, 1, 1, 2, 2]);
    expect(calls).toEqual([
      ['m-0:true', 'm-1:true', 'm-2:true'],
      ['m-3:false', 'm-4:false'],
    ]);
    expect(commits).toEqual(['0@3', '0@5']);
    runtime.close();
  });

  it('batch processor: a heartbeat the group refuses inside a call stops it uncommitted, whatever the processor returns, and kafkajs rejoins', async () => {
    const { runtime, calls, commits, join, records } = markingRuntime({
      batchSize: 3,
      during: async (call) => {
        // A core processor stops at the refusal and settles what is left as retries; this one swallows it.
        await call?.heartbeat?.().catch(() => {});
      },
    });
    join([0]);
    const heartbeat = async () => {
      throw protocolError('REBALANCE_IN_PROGRESS');
    };
    await expect(runtime.run({ topic: 'payments', partition: 0, messages: records(0, 5), heartbeat })).rejects.toThrow('REBALANCE_IN_PROGRESS');
    // Nothing more ran after the refusal and nothing was committed: the records come back in the next generation.
    expect(calls).toEqual([['m-0:true', 'm-1:true', 'm-2:true']]);
    expect(commits).toEqual([]);
    runtime.close();
  });

  it('per-message processor: the first record per generation; a rebalance while it runs marks its replay in the next generation', async () => {
    let rebalanced = false;
    const { runtime, calls, commits, join, records } = markingRuntime({
      outcome: (m) => {
        // The group rebalances (same assignment) while the first, marked, record is processed.
        if (m.id === 'm-0' && !rebalanced) {
          rebalanced = true;
          join([0]);
        }
        return undefined;
      },
    });
    join([0]);
    await runtime.run({ topic: 'payments', partition: 0, messages: records(0, 3) });
    expect(calls.flat()).toEqual(['m-0:true']);
    expect(commits).toEqual([]); // its generation ended: nothing settles, kafkajs replays it
    await runtime.run({ topic: 'payments', partition: 0, messages: records(0, 3) });
    expect(calls.flat()).toEqual(['m-0:true', 'm-0:true', 'm-1:false', 'm-2:false']);
    expect(commits).toEqual(['0@1', '0@2', '0@3']);
    runtime.close();
  });

  it('the replay of a hold is marked again when the held call was marked (its record still owes a counted run), not otherwise', async () => {
    const failed = new Set<string>();
    const { runtime, calls, commits, join, records } = markingRuntime({
      batchSize: 2,
      // m-1 (in the first, marked call) and m-3 (in an unmarked one) each come back `retry` once.
      outcome: (m) => {
        if ((m.id !== 'm-1' && m.id !== 'm-3') || failed.has(m.id)) return undefined;
        failed.add(m.id);
        return {
          status: 'retry',
          reason: OutcomeReasons.DATABASE_UNAVAILABLE,
          retryAfterMs: 20,
          error: new InboxError(InboxErrorCodes.DATABASE_UNAVAILABLE, 'not counted'),
          messageId: m.id,
          consumer: 'billing',
        };
      },
    });
    join([0]);
    await runtime.run({ topic: 'payments', partition: 0, messages: records(0, 6) });
    expect(runtime.holds.isHeld('payments', 0)).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await runtime.run({ topic: 'payments', partition: 0, messages: records(1, 6) });
    expect(runtime.holds.isHeld('payments', 0)).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await runtime.run({ topic: 'payments', partition: 0, messages: records(3, 6) });
    expect(calls).toEqual([
      ['m-0:true', 'm-1:true'],
      ['m-1:true', 'm-2:true'], // the marked call's hold: its replay is marked
      ['m-3:false', 'm-4:false'],
      ['m-3:false', 'm-4:false'], // an unmarked call's hold: not marked
      ['m-5:false'],
    ]);
    expect(commits).toEqual(['0@1', '0@3', '0@5', '0@6']);
    runtime.close();
  });
});
