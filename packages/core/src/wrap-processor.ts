import type { InboxBatchProcessor, InboxMessage, InboxOutcome, InboxProcessor } from './types.js';

/** Middleware around a per-message processor: call `next(message)` to run it. */
export type ProcessorMiddleware = (message: InboxMessage, next: InboxProcessor) => Promise<InboxOutcome>;

/** Middleware around a batch processor: call `next(messages)` to run it; return one outcome per message. */
export type BatchProcessorMiddleware = (messages: readonly InboxMessage[], next: InboxBatchProcessor) => Promise<InboxOutcome[]>;

/**
 * Wraps a processor in middleware (timing, logging, tracing) and returns a processor of the same
 * kind that broker consumers accept: it keeps `kind`, `consumer` and `checkTables`, which a plain
 * function wrapper would lose.
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
 * its own code throws) so every delivery still ends as exactly one outcome.
 */
export function wrapProcessor(processor: InboxProcessor, middleware: ProcessorMiddleware): InboxProcessor;
export function wrapProcessor(processor: InboxBatchProcessor, middleware: BatchProcessorMiddleware): InboxBatchProcessor;
export function wrapProcessor(
  processor: InboxProcessor | InboxBatchProcessor,
  middleware: ProcessorMiddleware | BatchProcessorMiddleware,
): InboxProcessor | InboxBatchProcessor {
  const checkTables = () => processor.checkTables();
  if (processor.kind === 'batch') {
    const around = middleware as BatchProcessorMiddleware;
    return Object.assign((messages: readonly InboxMessage[]) => around(messages, processor), {
      kind: 'batch' as const,
      consumer: processor.consumer,
      checkTables,
    });
  }
  const around = middleware as ProcessorMiddleware;
  return Object.assign((message: InboxMessage) => around(message, processor), { kind: 'single' as const, consumer: processor.consumer, checkTables });
}
