import type { SqsBatchCalls, SqsEntry } from './sqs-batch-calls.js';
import { SqsErrorCodes } from './sqs-errors.js';
import { capVisibility } from './sqs-visibility.js';

/**
 * Keeps messages invisible while their handler runs: every `intervalMs` it resets their visibility
 * timeout to `visibilityTimeoutSeconds` from now (capped at SQS's 12 hours per receive), so a slow
 * handler is not redelivered to another consumer under its feet. A message is released before it is
 * settled, and {@link release} waits for an extension in flight, so a late heartbeat can never
 * overwrite the visibility a retry just set.
 */
export class VisibilityHeartbeat {
  private readonly tracked = new Set<SqsEntry>();
  private timer: NodeJS.Timeout | undefined;
  private tick: Promise<void> = Promise.resolve();

  constructor(
    private readonly calls: SqsBatchCalls,
    private readonly visibilityTimeoutSeconds: number,
    private readonly intervalMs: number,
    private readonly receivedAt: Date,
  ) {}

  /** Starts extending `entries`. A zero interval disables heartbeats. */
  start(entries: readonly SqsEntry[]): void {
    if (this.intervalMs <= 0 || entries.length === 0) return;
    for (const entry of entries) this.tracked.add(entry);
    this.timer = setInterval(() => {
      // One extension at a time: a slow SQS call must not pile up behind itself.
      this.tick = this.tick.then(() => this.extend());
    }, this.intervalMs);
    this.timer.unref();
  }

  private async extend(): Promise<void> {
    const seconds = capVisibility(this.visibilityTimeoutSeconds, this.receivedAt);
    const entries = [...this.tracked];
    if (entries.length === 0 || seconds === 0) return;
    const failed = await this.calls.changeVisibility(
      entries.map((entry) => ({ ...entry, seconds })),
      SqsErrorCodes.HEARTBEAT_FAILED,
      'heartbeat (visibility extension of running messages)',
    );
    // A receipt handle that failed once (expired, re-received elsewhere) will not recover.
    for (const entry of failed) for (const t of this.tracked) if (t.message === entry.message) this.tracked.delete(t);
  }

  /** Stops extending `entries` and waits until no extension is in flight. */
  async release(entries: readonly SqsEntry[]): Promise<void> {
    const messages = new Set(entries.map((e) => e.message));
    for (const t of this.tracked) if (messages.has(t.message)) this.tracked.delete(t);
    if (this.tracked.size === 0) this.clear();
    await this.tick;
  }

  /** Stops all extensions; waits for one in flight. */
  async stop(): Promise<void> {
    this.tracked.clear();
    this.clear();
    await this.tick;
  }

  private clear(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}
