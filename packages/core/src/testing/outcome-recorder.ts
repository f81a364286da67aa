import { isBatchProcessor, type AnyInboxProcessor, type InboxOutcome, type InboxStatus } from '../types.js';
import { wrapProcessor } from '../wrap-processor.js';

/** Records every outcome a processor produces, so tests can wait for a message to settle. */
export interface OutcomeRecorder {
  /** Every outcome so far, in the order they were produced. */
  readonly outcomes: readonly InboxOutcome[];
  /** Wraps a processor (per-message or batch); hand the wrapped one to your consumer. */
  wrap<P extends AnyInboxProcessor>(processor: P): P;
  /** Resolves with the first outcome for `messageId` (optionally with `status`), waiting up to `timeoutMs` (default 10 s). */
  waitFor(messageId: string, options?: { status?: InboxStatus; timeoutMs?: number }): Promise<InboxOutcome>;
  /** Resolves once `count` outcomes matching `filter` were recorded. */
  waitForCount(count: number, filter?: (outcome: InboxOutcome) => boolean, timeoutMs?: number): Promise<InboxOutcome[]>;
  /** Outcomes per status. */
  counts(): Partial<Record<InboxStatus, number>>;
  /** Forgets everything recorded. */
  clear(): void;
}

/**
 * A test helper for users of inboxed: wrap your processor, drive your consumer, then
 * `await recorder.waitFor('order-42', { status: 'processed' })`.
 */
export function createOutcomeRecorder(): OutcomeRecorder {
  const outcomes: InboxOutcome[] = [];
  let waiters: Array<() => void> = [];
  const record = (outcome: InboxOutcome) => {
    outcomes.push(outcome);
    const pending = waiters;
    waiters = [];
    for (const wake of pending) wake();
  };
  const until = <T>(find: () => T | undefined, timeoutMs: number, what: string): Promise<T> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
      const check = () => {
        const found = find();
        if (found !== undefined) {
          clearTimeout(timer);
          resolve(found);
        } else {
          waiters.push(check);
        }
      };
      check();
    });

  return {
    outcomes,
    wrap<P extends AnyInboxProcessor>(processor: P): P {
      const wrapped = isBatchProcessor(processor)
        ? wrapProcessor(processor, async (messages, next) => {
            const result = await next(messages);
            result.forEach(record);
            return result;
          })
        : wrapProcessor(processor, async (message, next) => {
            const result = await next(message);
            record(result);
            return result;
          });
      // Outcomes the consumer decides itself (no id, unparseable body) never reach the processor.
      return Object.assign(wrapped, {
        observe: (outcome: InboxOutcome) => {
          record(outcome);
          processor.observe(outcome);
        },
      }) as P;
    },
    waitFor(messageId, options = {}) {
      const what = `message ${messageId}${options.status ? ` with status ${options.status}` : ''}`;
      return until(
        () => outcomes.find((o) => o.messageId === messageId && (options.status === undefined || o.status === options.status)),
        options.timeoutMs ?? 10_000,
        what,
      );
    },
    waitForCount(count, filter = () => true, timeoutMs = 10_000) {
      return until(
        () => {
          const matching = outcomes.filter(filter);
          return matching.length >= count ? matching : undefined;
        },
        timeoutMs,
        `${count} outcomes`,
      );
    },
    counts() {
      const counts: Partial<Record<InboxStatus, number>> = {};
      for (const o of outcomes) counts[o.status] = (counts[o.status] ?? 0) + 1;
      return counts;
    },
    clear() {
      outcomes.length = 0;
    },
  };
}
