import {
  checkTablesAtStart,
  ConsumerEventEmitter,
  ConsumerLifecycle,
  defaultLogger,
  guardRetentionAtStart,
  InFlight,
  type InboxConsumer,
  type RedeliveryHorizon,
} from '@inboxed/core/adapter';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';
import { checkHeartbeat, createProcessing, receiveSettings, type SqsConsumerOptions } from './sqs-options.js';
import { poll } from './sqs-poller.js';
import { sourceOf } from './sqs-message.js';
import { redriveReceiveCountProblem } from './sqs-redrive.js';
import { sqsRedeliveryHorizon, unreadSqsHorizon } from './sqs-retention.js';

/**
 * Polls an SQS queue and runs each message through an inbox processor, so its database effect
 * commits once however often SQS delivers it. Messages are deleted only after their outcome is
 * final; retries become visibility timeouts with exponential backoff; running handlers are kept
 * invisible by heartbeats; dead-letters go to `deadLetterQueueUrl` (or the redrive policy); FIFO
 * groups are processed in order. One lifecycle, events and `status()` as every inboxed consumer.
 *
 * ```ts
 * const consumer = createSqsConsumer({ client: new SQSClient({}), queueUrl, deadLetterQueueUrl, handler: withInbox(handle, { db, consumer: 'notifications' }) });
 * consumer.on('error', (error) => log.error(error));
 * await consumer.start();
 * process.on('SIGTERM', () => consumer.stop());
 * ```
 *
 * Invalid options throw `INVALID_OPTIONS` here; `start()` rejects with `INBOX_TABLE_MISSING` or
 * `SQS_QUEUE_UNAVAILABLE` (the queue's attributes cannot be read), and reports (as `error` events,
 * without failing) `SQS_NO_DEAD_LETTER_TARGET` and `SQS_REDRIVE_RECEIVE_COUNT_LOW`.
 */
export function createSqsConsumer(options: SqsConsumerOptions): InboxConsumer {
  const events = new ConsumerEventEmitter(options?.logger ?? defaultLogger);
  const processing = createProcessing(options, events);
  const receive = receiveSettings(options);
  const { client, queueUrl, processor, deadLetterQueueUrl, visibilityTimeoutSeconds } = processing.settings;
  const inFlight = new InFlight();
  let polling = new AbortController();
  let pollers: Promise<void>[] = [];
  let started = false;
  /** Pollers whose last receive failed: connected means none. */
  let failing = 0;
  const name = `sqs consumer ${sourceOf(queueUrl)}`;

  const lifecycle: ConsumerLifecycle = new ConsumerLifecycle(
    {
      async begin() {
        await checkTablesAtStart(processor, events);
        const info = await processing.queueInfo(true);
        checkHeartbeat(options.heartbeatIntervalMs, visibilityTimeoutSeconds ?? info.visibilityTimeoutSeconds);
        await guardRetentionAtStart(options, async () => [sqsRedeliveryHorizon(info, queueUrl)], events.logger, name);
        if (deadLetterQueueUrl === undefined && info.redrive === undefined) {
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
        // A finding, not a refusal: the queue is the operator's to fix; consuming goes on.
        const redriveProblem = redriveReceiveCountProblem(info, processor, queueUrl);
        if (redriveProblem !== undefined) events.emit('error', redriveProblem);
        polling = new AbortController();
        failing = 0;
        started = true;
        const ctx = {
          client,
          queueUrl,
          settings: receive,
          visibilityTimeoutSeconds,
          events,
          signal: polling.signal,
          process: (messages: Parameters<typeof processing.run>[0], receivedAt: Date) =>
            processing.run(messages, { signal: lifecycle.signal, receivedAt, inFlight }),
          lost() {
            if (failing++ === 0) lifecycle.reconnecting();
          },
          recovered() {
            if (--failing === 0) lifecycle.reconnected();
          },
        };
        pollers = Array.from({ length: receive.concurrency }, () => poll(ctx));
      },
      async quiesce() {
        // Ends the loops and aborts the long polls; what a poller already received is processed
        // (its handlers see the stop signal) or, not started yet, released at once.
        polling.abort();
      },
      async end() {
        started = false;
        // Pollers still settling after stopTimeoutMs finish on their own; the others end at once.
        if (inFlight.size === 0) await Promise.allSettled(pollers);
      },
      connected: () => started && failing === 0,
    },
    events,
    inFlight,
    receive.stopTimeoutMs,
    name,
  );

  return {
    start: () => lifecycle.start(),
    stop: () => lifecycle.stop(),
    status: () => lifecycle.status(),
    on: (event, listener) => events.on(event, listener),
    async redeliveryHorizon(): Promise<RedeliveryHorizon[]> {
      try {
        return [sqsRedeliveryHorizon(await processing.queueInfo(true), queueUrl)];
      } catch (error) {
        return [unreadSqsHorizon(queueUrl, error)];
      }
    },
  };
}
