import { ReceiveMessageCommand, type Message, type SQSClient } from '@aws-sdk/client-sqs';
import {
  backoffDelay,
  checkTablesAtStart,
  ConsumerEventEmitter,
  InboxError,
  InboxErrorCodes,
  InFlight,
  isInboxError,
  type AnyInboxProcessor,
  type BackoffOptions,
  type ConsumerEvents,
} from '@inboxed/core';
import { processSqsMessages, type ProcessSqsMessagesOptions } from './process-sqs-messages.js';
import { loadQueueInfo, type QueueInfo } from './queue-info.js';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';
import { MAX_VISIBILITY_TIMEOUT_SECONDS } from './sqs-visibility.js';

/** Options of {@link createSqsConsumer}. Everything of {@link ProcessSqsMessagesOptions} applies too. */
export interface SqsConsumerOptions extends Omit<ProcessSqsMessagesOptions, 'signal' | 'events' | 'receivedAt'> {
  /** A processor from `withInbox` (messages of a receive run concurrently) or `withInboxBatch` (one transaction per receive). */
  handler: AnyInboxProcessor;
  /** Messages per `ReceiveMessage`, 1-10. Default 10. */
  batchSize?: number | undefined;
  /** Pollers running side by side, each receiving and processing its own batches. Default 1. */
  concurrency?: number | undefined;
  /** Long-polling wait per receive, 0-20 seconds. Default 20. */
  waitTimeSeconds?: number | undefined;
  /**
   * Visibility timeout requested on each receive, in seconds (0-43200). Default: the queue's own.
   * Heartbeats extend running messages to it.
   */
  visibilityTimeoutSeconds?: number | undefined;
  /** How long `stop()` waits for messages in flight, in ms. Default 30000. */
  stopTimeoutMs?: number | undefined;
  /** Backoff between failed receives (then `reconnect` is emitted). Default 1 s doubling to 30 s, full jitter. */
  receiveBackoff?: BackoffOptions | undefined;
}

/** A snapshot of a consumer's state. */
export interface SqsConsumerStatus {
  /** `start()` was called and `stop()` was not. */
  isRunning: boolean;
  /** Receives currently waiting on SQS. */
  polling: number;
  /** Receive batches being processed. */
  inFlight: number;
}

/** A running SQS consumer. */
export interface SqsConsumer {
  /** Reads the queue's attributes (rejects with `SQS_QUEUE_UNAVAILABLE` if it cannot), then starts the pollers. */
  start(): Promise<void>;
  /**
   * Stops polling (aborting long polls), waits up to `stopTimeoutMs` for messages in flight and
   * releases received messages that had not started. Unfinished messages reappear after their
   * visibility timeout. Resolves when done; safe to call twice.
   */
  stop(): Promise<void>;
  /** Subscribes to an event: `message_processed`, `duplicate`, `retry`, `dead_letter`, `error`, `reconnect`. Returns an unsubscribe function. */
  on<K extends keyof ConsumerEvents>(event: K, listener: (...args: ConsumerEvents[K]) => void): () => void;
  /** Current state. */
  readonly status: SqsConsumerStatus;
}

function invalid(message: string): never {
  throw new InboxError(InboxErrorCodes.INVALID_OPTIONS, message);
}

function integerIn(value: number | undefined, fallback: number, min: number, max: number, name: string): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) invalid(`options.${name} must be an integer between ${min} and ${max}`);
  return v;
}

/**
 * Polls an SQS queue and runs each message through an inbox processor, so its database effect
 * commits once however often SQS delivers it. Messages are deleted only after their outcome is
 * final; retries become visibility timeouts with exponential backoff; running handlers are kept
 * invisible by heartbeats; dead-letters go to `deadLetterQueueUrl` (or the redrive policy); FIFO
 * groups are processed in order.
 *
 * ```ts
 * const consumer = createSqsConsumer({ client: new SQSClient({}), queueUrl, handler: withInbox(handle, { db, consumer: 'notifications' }) });
 * consumer.on('error', (error) => log.error(error));
 * await consumer.start();
 * process.on('SIGTERM', () => consumer.stop());
 * ```
 */
export function createSqsConsumer(options: SqsConsumerOptions): SqsConsumer {
  if (options === null || typeof options !== 'object') invalid('options are required');
  const { client, queueUrl, handler } = options;
  if (client === null || typeof client !== 'object' || typeof (client as SQSClient).send !== 'function') invalid('options.client must be an SQSClient');
  if (typeof queueUrl !== 'string' || queueUrl === '') invalid('options.queueUrl must be a queue URL');
  if (typeof handler !== 'function' || (handler.kind !== 'single' && handler.kind !== 'batch'))
    invalid('options.handler must be a processor from withInbox or withInboxBatch');
  const batchSize = integerIn(options.batchSize, 10, 1, 10, 'batchSize');
  const concurrency = integerIn(options.concurrency, 1, 1, 1000, 'concurrency');
  const waitTimeSeconds = integerIn(options.waitTimeSeconds, 20, 0, 20, 'waitTimeSeconds');
  const stopTimeoutMs = integerIn(options.stopTimeoutMs, 30_000, 0, 2 ** 31 - 1, 'stopTimeoutMs');
  if (options.visibilityTimeoutSeconds !== undefined)
    integerIn(options.visibilityTimeoutSeconds, 0, 0, MAX_VISIBILITY_TIMEOUT_SECONDS, 'visibilityTimeoutSeconds');
  if (options.heartbeatIntervalMs !== undefined) {
    integerIn(options.heartbeatIntervalMs, 0, 0, 2 ** 31 - 1, 'heartbeatIntervalMs');
    if (
      options.heartbeatIntervalMs > 0 &&
      options.visibilityTimeoutSeconds !== undefined &&
      options.heartbeatIntervalMs >= options.visibilityTimeoutSeconds * 1000
    ) {
      invalid('options.heartbeatIntervalMs must be shorter than the visibility timeout, or 0 to disable heartbeats');
    }
  }
  if (options.deleteAttempts !== undefined) integerIn(options.deleteAttempts, 3, 1, 100, 'deleteAttempts');

  const events = new ConsumerEventEmitter();
  const inFlight = new InFlight();
  let running = false;
  let polling = 0;
  let abort = new AbortController();
  let pollers: Promise<void>[] = [];
  let info: QueueInfo | undefined;
  let starting: Promise<void> | undefined;

  const receive = async (): Promise<Message[]> => {
    polling++;
    try {
      const result = await client.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: batchSize,
          WaitTimeSeconds: waitTimeSeconds,
          VisibilityTimeout: options.visibilityTimeoutSeconds,
          MessageAttributeNames: ['All'],
          MessageSystemAttributeNames: ['All'],
        }),
        { abortSignal: abort.signal },
      );
      return result.Messages ?? [];
    } finally {
      polling--;
    }
  };

  const poll = async (signal: AbortSignal): Promise<void> => {
    let failures = 0;
    let lastDelayMs = 0;
    while (running && !signal.aborted) {
      let messages: Message[];
      const receivedAt = new Date();
      try {
        messages = await receive();
      } catch (error) {
        if (signal.aborted) return;
        failures++;
        lastDelayMs = backoffDelay(failures, options.receiveBackoff ?? { baseDelayMs: 1000, maxDelayMs: 30_000 });
        events.emit(
          'error',
          toSqsError(SqsErrorCodes.RECEIVE_FAILED, `receive from ${queueUrl} failed (attempt ${failures}, next in ${lastDelayMs} ms)`, error, {
            details: { queueUrl },
          }),
        );
        await abortableSleep(lastDelayMs, signal);
        continue;
      }
      if (failures > 0) {
        events.emit('reconnect', { attempt: failures, delayMs: lastDelayMs });
        failures = 0;
      }
      if (messages.length === 0) continue;
      try {
        await inFlight.track(
          processSqsMessages(messages, handler, {
            ...options,
            visibilityTimeoutSeconds: options.visibilityTimeoutSeconds ?? info?.visibilityTimeoutSeconds,
            fifo: options.fifo ?? info?.fifo,
            receivedAt,
            signal,
            events,
          }),
        );
      } catch (error) {
        // Only the queue-attributes read can throw; the messages were not touched and will reappear.
        events.emit('error', isInboxError(error) ? error : toSqsError(SqsErrorCodes.QUEUE_UNAVAILABLE, 'processing a receive failed', error));
        await abortableSleep(1000, signal);
      }
    }
  };

  const begin = async (): Promise<void> => {
    if (running) return;
    await checkTablesAtStart(handler, events);
    const queue = await loadQueueInfo(client, queueUrl);
    info = queue;
    const visibility = options.visibilityTimeoutSeconds ?? queue.visibilityTimeoutSeconds;
    if (options.heartbeatIntervalMs !== undefined && options.heartbeatIntervalMs > 0 && options.heartbeatIntervalMs >= visibility * 1000) {
      invalid(
        `options.heartbeatIntervalMs (${options.heartbeatIntervalMs}) must be shorter than the visibility timeout (${visibility} s), or 0 to disable heartbeats`,
      );
    }
    if (options.deadLetterQueueUrl === undefined && queue.redrive === undefined) {
      events.emit(
        'error',
        toSqsError(
          SqsErrorCodes.NO_DEAD_LETTER_TARGET,
          `${queueUrl} has no redrive policy and no deadLetterQueueUrl was given: dead-lettered messages will be redelivered with backoff until they expire`,
          undefined,
          { details: { queueUrl } },
        ),
      );
    }
    running = true;
    abort = new AbortController();
    const signal = abort.signal;
    pollers = Array.from({ length: concurrency }, () => poll(signal));
  };

  return {
    start() {
      // Concurrent calls share one start; a failed start can be retried.
      starting ??= begin().finally(() => (starting = undefined));
      return starting;
    },
    async stop() {
      if (!running) {
        await Promise.allSettled(pollers);
        return;
      }
      running = false;
      abort.abort();
      const still = await inFlight.drain(stopTimeoutMs);
      if (still > 0) {
        events.emit(
          'error',
          new InboxError(
            SqsErrorCodes.STOP_TIMEOUT,
            `stop() gave up after ${stopTimeoutMs} ms with ${still} receive batch(es) still processing; they settle if the process keeps running, otherwise their messages reappear after the visibility timeout`,
            {
              details: { queueUrl, stopTimeoutMs, inFlight: still },
            },
          ),
        );
        return;
      }
      await Promise.allSettled(pollers);
    },
    on: (event, listener) => events.on(event, listener),
    get status() {
      return { isRunning: running, polling, inFlight: inFlight.size };
    },
  };
}

function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
