import { EventEmitter } from 'node:events';
import type { InboxMessage, InboxOutcome, InboxProcessor } from '@inboxed/core';
import { describe, expect, it } from 'vitest';
import { createKafkaConsumer } from './kafka-consumer.js';
import type { KafkaConsumerLike, KafkaLike } from './kafka-types.js';

const events = { CONNECT: 'connect', DISCONNECT: 'disconnect', GROUP_JOIN: 'group_join', REBALANCING: 'rebalancing', CRASH: 'crash', STOP: 'stop' };

/** A kafkajs stand-in: each consumer joins the group with partition 0 when run, and can be made to crash. */
function fakeKafka() {
  const consumers: Array<KafkaConsumerLike & { crash(restart: boolean): void }> = [];
  const kafka: KafkaLike = {
    producer: () => ({ connect: async () => {}, disconnect: async () => {}, send: async () => {} }),
    consumer() {
      const bus = new EventEmitter();
      const emit = (name: string, payload: unknown = {}) => bus.emit(name, { payload });
      const consumer = {
        connect: async () => void emit('connect'),
        disconnect: async () => {
          emit('stop');
          emit('disconnect');
        },
        subscribe: async () => {},
        run: async () => void emit('group_join', { memberAssignment: { payments: [0] } }),
        stop: async () => void emit('stop'),
        commitOffsets: async () => {},
        seek: () => {},
        pause: () => {},
        resume: () => {},
        on(name: string, listener: (event: { payload: unknown }) => void) {
          bus.on(name, listener);
          return () => bus.off(name, listener);
        },
        events,
        crash(restart: boolean) {
          emit('stop');
          emit('disconnect');
          emit('crash', { error: Object.assign(new Error('broker went away'), { name: 'KafkaJSNonRetriableError' }), restart });
        },
      };
      consumers.push(consumer);
      return consumer;
    },
  };
  return { kafka, consumers };
}

const processor = Object.assign(async (message: InboxMessage): Promise<InboxOutcome> => ({ status: 'processed', messageId: message.id, consumer: 'c' }), {
  kind: 'single' as const,
  consumer: 'c',
  checkTables: async () => {},
  observe: () => {},
}) satisfies InboxProcessor;

describe('createKafkaConsumer lifecycle around kafkajs', () => {
  it('a crash kafkajs does not recover from: reconnecting, a fresh consumer after the backoff, then reconnect and running again', async () => {
    const { kafka, consumers } = fakeKafka();
    const consumer = createKafkaConsumer({ kafka, groupId: 'g', topics: ['payments'], handler: processor });
    const seen: string[] = [];
    consumer.on('error', (error) => seen.push(`error ${error.code} restart=${String(error.details.restart)}`));
    consumer.on('reconnect', ({ attempt }) => seen.push(`reconnect ${attempt}`));
    await consumer.start();
    expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true });

    consumers[0]!.crash(false);
    expect(consumer.status()).toMatchObject({ state: 'reconnecting', connected: false, consuming: false });
    await new Promise((resolve) => setTimeout(resolve, 1_200)); // the first restart waits 0.5-1 s
    expect(consumers).toHaveLength(2);
    expect(consumer.status()).toMatchObject({ state: 'running', connected: true, consuming: true });
    expect(seen).toEqual(['error KAFKA_CONSUMER_CRASHED restart=false', 'reconnect 1']);
    await consumer.stop();
    expect(consumer.status()).toMatchObject({ state: 'stopped', connected: false });
  });

  it('a crash kafkajs restarts itself: reconnecting until the consumer rejoins; restartOnCrash: false stays down', async () => {
    const { kafka, consumers } = fakeKafka();
    const consumer = createKafkaConsumer({ kafka, groupId: 'g', topics: ['payments'], handler: processor, restartOnCrash: false });
    consumer.on('error', () => {});
    const reconnects: number[] = [];
    consumer.on('reconnect', ({ attempt }) => reconnects.push(attempt));
    await consumer.start();
    consumers[0]!.crash(true);
    expect(consumer.status()).toMatchObject({ state: 'reconnecting', connected: false });
    await consumers[0]!.run({}); // kafkajs' own restart joins again
    expect(consumer.status()).toMatchObject({ state: 'running', connected: true });
    expect(reconnects).toEqual([1]);

    consumers[0]!.crash(false);
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(consumers).toHaveLength(1);
    expect(consumer.status()).toMatchObject({ state: 'running', connected: false, consuming: false });
    await consumer.stop();
    await consumer.start(); // restartable after stop
    expect(consumers).toHaveLength(2);
    expect(consumer.status()).toMatchObject({ state: 'running', connected: true });
    await consumer.stop();
  });
});
