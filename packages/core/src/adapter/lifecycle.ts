import { describeError } from '../error-text.js';
import { InboxError, InboxErrorCodes } from '../errors.js';
import type { ConsumerState, ConsumerStatus } from './contract.js';
import type { ConsumerEventEmitter } from './events.js';
import type { InFlight } from './in-flight.js';

/** What an adapter plugs into the shared lifecycle: how to start and stop its broker side. */
export interface LifecycleHooks {
  /**
   * Connects and starts consuming; rejects when that fails (the consumer is then `stopped`).
   * `signal` fires when `stop()` is called before the start finished: give up (reject) soon after,
   * closing what was opened, so a start stuck on an unreachable broker does not hold up `stop()`.
   */
  begin(signal: AbortSignal): Promise<void>;
  /** Stops taking deliveries (cancel, pause, stop polling); the lifecycle then drains what is in flight. */
  quiesce(): Promise<void>;
  /** Disconnects, after the drain (or after `stopTimeoutMs`). */
  end(): Promise<void>;
  /** Connected to the broker right now. */
  connected(): boolean;
}

/**
 * The one lifecycle of every broker consumer: `idle` -> `starting` -> `running` (<-> `reconnecting`)
 * -> `stopping` -> `stopped`, restartable. Concurrent `start()` calls share one start; `start()` on a
 * running consumer does nothing; `stop()` is idempotent and, after `quiesce`, waits up to
 * `stopTimeoutMs` for deliveries in flight (their handlers' signals fire at once), reports
 * `STOP_TIMEOUT` with how many were left, then ends.
 */
export class ConsumerLifecycle {
  state: ConsumerState = 'idle';
  /** Fires when `stop()` begins: handed to every processor call, so handlers see it. */
  private stopping = new AbortController();
  private starting: Promise<void> | undefined;
  private ending: Promise<void> | undefined;

  constructor(
    private readonly hooks: LifecycleHooks,
    private readonly events: ConsumerEventEmitter,
    private readonly inFlight: InFlight,
    private readonly stopTimeoutMs: number,
    private readonly name: string,
  ) {}

  /** The signal processor calls get: it fires when the consumer starts stopping. */
  get signal(): AbortSignal {
    return this.stopping.signal;
  }

  /** True while the consumer should take and process deliveries. */
  get active(): boolean {
    return this.state === 'running' || this.state === 'reconnecting' || this.state === 'starting';
  }

  start(): Promise<void> {
    if (this.state === 'running' || this.state === 'reconnecting') return Promise.resolve();
    if (this.starting !== undefined) return this.starting;
    if (this.state === 'stopping') {
      return Promise.reject(new InboxError(InboxErrorCodes.INVALID_OPTIONS, `${this.name}: start() called while stop() is running; await stop() first`));
    }
    this.state = 'starting';
    this.stopping = new AbortController();
    this.starting = this.hooks.begin(this.stopping.signal).then(
      () => {
        this.starting = undefined;
        if (this.state === 'starting') {
          this.state = 'running';
          this.events.logger.info({ consumer: this.name }, 'started');
          this.events.emit('started');
        }
      },
      (error: unknown) => {
        this.starting = undefined;
        this.state = 'stopped';
        throw error;
      },
    );
    return this.starting;
  }

  /** The adapter lost its connection and re-establishes it. */
  reconnecting(): void {
    if (this.state === 'running') this.state = 'reconnecting';
  }

  /** The adapter's connection is back. */
  reconnected(): void {
    if (this.state === 'reconnecting') this.state = 'running';
  }

  stop(): Promise<void> {
    if (this.ending !== undefined) return this.ending;
    if (this.state === 'idle' || this.state === 'stopped') return Promise.resolve();
    // Say so at once (health probes, `active`); a consumer still starting says `stopping` once started.
    if (this.state !== 'starting') this.state = 'stopping';
    this.ending = this.drainAndEnd().finally(() => {
      this.ending = undefined;
    });
    return this.ending;
  }

  private async drainAndEnd(): Promise<void> {
    this.stopping.abort();
    if (this.starting !== undefined) {
      const started = await this.starting.then(
        () => true,
        () => false,
      );
      if (!started) return; // begin() gave up (or failed) and closed what it opened: nothing to stop
    }
    this.state = 'stopping';
    try {
      await this.hooks.quiesce();
    } catch (error) {
      this.events.logger.warn({ err: error, consumer: this.name }, `stopping: ${describeError(error)}`);
    }
    const left = await this.inFlight.drain(this.stopTimeoutMs);
    if (left > 0) {
      this.events.emit(
        'error',
        new InboxError(
          InboxErrorCodes.STOP_TIMEOUT,
          `${this.name}: ${left} deliver${left === 1 ? 'y' : 'ies'} still in flight after stopTimeoutMs (${this.stopTimeoutMs} ms); stopping anyway, they will be redelivered`,
          { details: { inFlight: left, stopTimeoutMs: this.stopTimeoutMs } },
        ),
      );
    }
    try {
      await this.hooks.end();
    } finally {
      this.state = 'stopped';
      this.events.logger.info({ consumer: this.name }, 'stopped');
      this.events.emit('stopped');
    }
  }

  /** State for health probes. */
  status(): ConsumerStatus {
    const connected = this.hooks.connected();
    return {
      state: this.state,
      connected,
      consuming: connected && this.state === 'running',
      inFlight: this.inFlight.size,
      ...(this.events.lastSettledAt === undefined ? {} : { lastSettledAt: this.events.lastSettledAt }),
      ...(this.events.lastError === undefined ? {} : { lastError: this.events.lastError }),
    };
  }
}
