import type { InboxBatchProcessor, InboxMessage, InboxOutcome, InboxProcessor } from './types.js';

/** Middleware around a per-message processor: call `next(message)` to run it. */
export type ProcessorMiddleware = (message: InboxMessage, next: (message: InboxMessage) => Promise<InboxOutcome>) => Promise<InboxOutcome>;

/** Middleware around a batch processor: call `next(messages)` to run it; return one outcome per message. */
export type BatchProcessorMiddleware = (
  messages: readonly InboxMessage[],
  next: (messages: readonly InboxMessage[]) => Promise<InboxOutcome[]>,
) => Promise<InboxOutcome[]>;

/**
 * Wraps a processor in middleware (timing, logging, tracing) and returns a processor of the same
 * kind that broker consumers accept: it keeps `kind`, `consumer`, `checkTables` and `observe`, and
 * passes the consumer's stop signal through `next`, which a plain function wrapper would lose.
 *
 * ```ts
 * const timed = wrapProcessor(withInbox(handler, options), async (message, next) => {
 *   const started = performance.now();
 *   const outcome = await next(message);
 *   log.info({ id: message.id, status: outcome.status, ms: performance.now() - started });
 *   return outcome;
 * });
 * ```
 *
 * A processor never rejects for a message's sake; middleware should keep that promise (catch what
 * its own code throws). If it does not, consumers retry the delivery (reason `processor-threw`).
 */
export function wrapProcessor(processor: InboxProcessor, middleware: ProcessorMiddleware): InboxProcessor;
export function wrapProcessor(processor: InboxBatchProcessor, middleware: BatchProcessorMiddleware): InboxBatchProcessor;
export function wrapProcessor(
  processor: InboxProcessor | InboxBatchProcessor,
  middleware: ProcessorMiddleware | BatchProcessorMiddleware,
): InboxProcessor | InboxBatchProcessor {
  const shared = {
    consumer: processor.consumer,
    checkTables: () => processor.checkTables(),
    observe: (outcome: InboxOutcome) => processor.observe(outcome),
    ...(processor.recordDeadLetter === undefined ? {} : { recordDeadLetter: processor.recordDeadLetter }),
    ...(processor.maxAttempts === undefined ? {} : { maxAttempts: processor.maxAttempts }),
  };
  if (processor.kind === 'batch') {
    const around = middleware as BatchProcessorMiddleware;
    return Object.assign(
      (messages: readonly InboxMessage[], options?: Parameters<InboxBatchProcessor>[1]) => around(messages, (next) => processor(next, options)),
      { kind: 'batch' as const, ...shared },
    );
  }
  const around = middleware as ProcessorMiddleware;
  return Object.assign((message: InboxMessage, options?: Parameters<InboxProcessor>[1]) => around(message, (next) => processor(next, options)), {
    kind: 'single' as const,
    ...shared,
  });
}
