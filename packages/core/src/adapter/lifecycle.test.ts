import { describe, expect, it } from 'vitest';
import type { InboxError } from '../errors.js';
import { ConsumerEventEmitter } from './events.js';
import { InFlight } from './in-flight.js';
import { ConsumerLifecycle, type LifecycleHooks } from './lifecycle.js';
import type { InboxLogger } from './logger.js';

/** A broker side that records what the lifecycle asked of it, with knobs to make each step fail or hang. */
function fakeBroker() {
  const calls: string[] = [];
  let connected = false;
  const knobs: { beginFails?: Error; quiesceFails?: Error; beginGate?: Promise<void>; beginHangsUntilAborted?: boolean } = {};
  const hooks: LifecycleHooks = {
    async begin(signal) {
      calls.push('begin');
      await knobs.beginGate;
      if (knobs.beginHangsUntilAborted) {
        if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve));
        throw new Error('start abandoned: the consumer is stopping');
      }
      if (knobs.beginFails !== undefined) throw knobs.beginFails;
      connected = true;
    },
    async quiesce() {
      calls.push('quiesce');
      if (knobs.quiesceFails !== undefined) throw knobs.quiesceFails;
    },
    async end() {
      calls.push('end');
      connected = false;
    },
    connected: () => connected,
  };
  return { calls, knobs, hooks };
}

const quietLogger = (): InboxLogger & { warnings: string[] } => {
  const warnings: string[] = [];
  return { warnings, debug() {}, info() {}, error() {}, warn: (_fields, message) => void warnings.push(String(message)) };
};

function setup(stopTimeoutMs = 1_000) {
  const broker = fakeBroker();
  const logger = quietLogger();
  const events = new ConsumerEventEmitter(logger);
  const inFlight = new InFlight();
  const lifecycle = new ConsumerLifecycle(broker.hooks, events, inFlight, stopTimeoutMs, 'test consumer');
  const seen: string[] = [];
  const errors: InboxError[] = [];
  events.on('started', () => seen.push('started'));
  events.on('stopped', () => seen.push('stopped'));
  events.on('error', (error) => errors.push(error));
  return { broker, logger, events, inFlight, lifecycle, seen, errors };
}

describe('ConsumerLifecycle', () => {
  it('goes idle -> running -> stopped and can start again, with one started/stopped pair each time', async () => {
    const { broker, lifecycle, seen } = setup();
    expect(lifecycle.status()).toEqual({ state: 'idle', connected: false, consuming: false, inFlight: 0 });
    await lifecycle.start();
    expect(lifecycle.status()).toMatchObject({ state: 'running', connected: true, consuming: true });
    await lifecycle.start();
    await lifecycle.stop();
    await lifecycle.stop();
    expect(lifecycle.status()).toMatchObject({ state: 'stopped', connected: false, consuming: false });
    await lifecycle.start();
    await lifecycle.stop();
    expect(broker.calls).toEqual(['begin', 'quiesce', 'end', 'begin', 'quiesce', 'end']);
    expect(seen).toEqual(['started', 'stopped', 'started', 'stopped']);
  });

  it('shares one start between concurrent start() calls', async () => {
    const { broker, lifecycle } = setup();
    let open!: () => void;
    broker.knobs.beginGate = new Promise((resolve) => (open = resolve));
    const starts = [lifecycle.start(), lifecycle.start(), lifecycle.start()];
    expect(lifecycle.state).toBe('starting');
    open();
    await Promise.all(starts);
    expect(broker.calls).toEqual(['begin']);
    expect(lifecycle.state).toBe('running');
  });

  it('a failed start leaves the consumer stopped, rejects every waiting start(), and may be retried', async () => {
    const { broker, lifecycle, seen } = setup();
    broker.knobs.beginFails = new Error('connection refused');
    await expect(Promise.all([lifecycle.start(), lifecycle.start()])).rejects.toThrow('connection refused');
    expect(lifecycle.state).toBe('stopped');
    expect(seen).toEqual([]);
    broker.knobs.beginFails = undefined;
    await lifecycle.start();
    expect(lifecycle.state).toBe('running');
  });

  it('stop() during start waits for the start, then stops: it never leaves a consumer running', async () => {
    const { broker, lifecycle } = setup();
    let open!: () => void;
    broker.knobs.beginGate = new Promise((resolve) => (open = resolve));
    const started = lifecycle.start();
    const stopped = lifecycle.stop();
    open();
    await started;
    await stopped;
    expect(lifecycle.state).toBe('stopped');
    expect(broker.calls).toEqual(['begin', 'quiesce', 'end']);
  });

  it('stop() during a start stuck on the broker aborts the start instead of waiting for it', async () => {
    const { broker, lifecycle, seen } = setup();
    broker.knobs.beginHangsUntilAborted = true;
    const started = lifecycle.start();
    const rejected = expect(started).rejects.toThrow('start abandoned');
    await lifecycle.stop();
    await rejected;
    expect(lifecycle.state).toBe('stopped');
    expect(broker.calls).toEqual(['begin']);
    expect(seen).toEqual([]);
  });

  it('refuses start() while stop() is running, with a typed error', async () => {
    const { lifecycle, inFlight } = setup();
    await lifecycle.start();
    let finish!: () => void;
    inFlight.track(new Promise<void>((resolve) => (finish = resolve)));
    const stopped = lifecycle.stop();
    await Promise.resolve();
    await expect(lifecycle.start()).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
    finish();
    await stopped;
  });

  it('stop() fires the signal, waits for deliveries in flight, and only then disconnects', async () => {
    const { broker, lifecycle, inFlight } = setup();
    await lifecycle.start();
    const signal = lifecycle.signal;
    const order: string[] = [];
    inFlight.track(
      new Promise<void>((resolve) => {
        signal.addEventListener('abort', () =>
          setTimeout(() => {
            order.push('delivery settled');
            resolve();
          }, 20),
        );
      }),
    );
    expect(lifecycle.status().inFlight).toBe(1);
    const stopped = lifecycle.stop();
    expect(lifecycle.status()).toMatchObject({ state: 'stopping', consuming: false });
    await stopped;
    order.push(...broker.calls.slice(1));
    expect(signal.aborted).toBe(true);
    expect(order).toEqual(['delivery settled', 'quiesce', 'end']);
    await lifecycle.start();
    expect(lifecycle.signal.aborted).toBe(false);
  });

  it('reports STOP_TIMEOUT with the count left when deliveries outlive stopTimeoutMs, and still disconnects', async () => {
    const { broker, lifecycle, inFlight, errors, seen } = setup(50);
    await lifecycle.start();
    inFlight.track(new Promise(() => {}));
    inFlight.track(new Promise(() => {}));
    await lifecycle.stop();
    expect(errors.map((e) => [e.code, e.details])).toEqual([['STOP_TIMEOUT', { inFlight: 2, stopTimeoutMs: 50 }]]);
    expect(broker.calls.at(-1)).toBe('end');
    expect(seen.at(-1)).toBe('stopped');
  });

  it('a failing quiesce is logged, not thrown: the consumer still drains and disconnects', async () => {
    const { broker, lifecycle, logger } = setup();
    await lifecycle.start();
    broker.knobs.quiesceFails = new Error('channel already closed');
    await lifecycle.stop();
    expect(logger.warnings).toEqual(['stopping: Error: channel already closed']);
    expect(broker.calls.at(-1)).toBe('end');
  });

  it('status() follows reconnects and reports the last settle and the last error', async () => {
    const { lifecycle, events } = setup();
    await lifecycle.start();
    lifecycle.reconnecting();
    expect(lifecycle.status()).toMatchObject({ state: 'reconnecting', consuming: false });
    lifecycle.reconnected();
    events.emitOutcome({ status: 'processed', messageId: 'm', consumer: 'c' }, new Date());
    events.emit('error', new (await import('../errors.js')).InboxError('AMQP_CHANNEL_CLOSED', 'channel closed'));
    const status = lifecycle.status();
    expect(status).toMatchObject({ state: 'running', consuming: true, lastError: { code: 'AMQP_CHANNEL_CLOSED', message: 'channel closed' } });
    expect(status.lastSettledAt).toBeInstanceOf(Date);
    await lifecycle.stop();
  });
});
