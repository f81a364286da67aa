import type { Message } from '@aws-sdk/client-sqs';
import { ConsumerEventEmitter, type ConsumerEvents, defaultLogger } from '@inboxed/core/adapter';
import { createProcessing, type SqsHandlerOptions } from './sqs-options.js';
import type { SqsHandleResult } from './sqs-processing.js';

/** The low-level handler for your own receive loop; see {@link createSqsHandler}. */
export interface SqsHandler {
  /**
   * Processes messages you received from `queueUrl` and settles each on SQS by its outcome.
   * Resolves once every message is settled (see `results[i].settlement`); rejects only with
   * `SQS_QUEUE_UNAVAILABLE` when it needs the queue's attributes and cannot read them (then
   * nothing was processed). `signal` is handed to the handlers (`context.signal`); once it has
   * fired, messages not yet started are released (visibility 0) instead of processed.
   */
  handle(messages: readonly Message[], options?: { signal?: AbortSignal; receivedAt?: Date }): Promise<SqsHandleResult>;
  /** Subscribes to an event (the consumer's: outcomes with timings, `error`); returns the function that unsubscribes. */
  on<K extends keyof ConsumerEvents>(event: K, listener: (...args: ConsumerEvents[K]) => void): () => void;
}

/**
 * Everything `createSqsConsumer` does with received messages, for messages you receive yourself:
 * acked outcomes are deleted (`DeleteMessageBatch`, failed entries retried), `retry` ones get a
 * visibility timeout of their backoff (`busy` ones: of their `retryAfterMs`, at least 1 s; never
 * deleted or dead-lettered), dead-letters are sent to `deadLetterQueueUrl` and then deleted (or left
 * to the redrive policy); while the processor runs a heartbeat keeps the messages invisible; FIFO
 * groups are processed in order.
 *
 * Receive with `MessageAttributeNames: ['All']` and `MessageSystemAttributeNames: ['All']` so ids,
 * receive counts and groups are available.
 *
 * ```ts
 * const handler = createSqsHandler({ client, queueUrl, deadLetterQueueUrl, handler: processor });
 * const { Messages = [] } = await client.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10,
 *   WaitTimeSeconds: 20, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }));
 * const { results, errors } = await handler.handle(Messages);
 * ```
 */
export function createSqsHandler(options: SqsHandlerOptions): SqsHandler {
  const events = new ConsumerEventEmitter(options?.logger ?? defaultLogger);
  const processing = createProcessing(options, events);
  return {
    handle: (messages, handleOptions = {}) => processing.run(messages, handleOptions),
    on: (event, listener) => events.on(event, listener),
  };
}
