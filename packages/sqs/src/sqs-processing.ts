import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import { describeError, isBatchProcessor, type AnyInboxProcessor, type InboxError, type InboxMessage, type InboxOutcome } from '@inboxed/core';
import { type BackoffOptions, callProcessor, type ConsumerEventEmitter, type InFlight, type MessagingContext } from '@inboxed/core/adapter';
import { SqsBatchCalls } from './sqs-batch-calls.js';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';
import { VisibilityHeartbeat } from './sqs-heartbeat.js';
import { messageGroupId, type MessageMapping, toInboxMessage } from './sqs-message.js';
import { type QueueInfo, readQueueInfo, redriveDestination } from './sqs-queue-info.js';
import { type ReceivedEntry, type SettlementContext, settle, type SqsMessageResult } from './sqs-settlement.js';
import { capVisibility } from './sqs-visibility.js';

/** The result of handling one receive, in input order. */
export interface SqsHandleResult {
  results: SqsMessageResult[];
  /** Every SQS failure met on the way (also emitted as `error` events). */
  errors: InboxError[];
}

/** Resolved settings of the processing of received messages, shared by the consumer and the handler. */
export interface ProcessingSettings {
  client: SQSClient;
  queueUrl: string;
  processor: AnyInboxProcessor;
  deadLetterQueueUrl: string | undefined;
  mapping: MessageMapping;
  visibilityTimeoutSeconds: number | undefined;
  heartbeatIntervalMs: number | undefined;
  redeliveryBackoff: BackoffOptions;
  deleteAttempts: number;
  fifo: boolean | undefined;
  batchSize: number;
  beforeSettle: ((outcome: InboxOutcome) => void | Promise<void>) | undefined;
}

/** Per receive: the stop signal handed to the processor, when the messages were received, what to register in-flight work with. */
export interface RunOptions {
  signal?: AbortSignal | undefined;
  receivedAt?: Date | undefined;
  inFlight?: InFlight | undefined;
}

/**
 * Processes the messages of one receive and settles each on SQS: maps them, keeps them invisible
 * with a heartbeat while the processor runs, runs FIFO groups in order (a message that is not final
 * holds back the rest of its group only), settles by outcome, and returns what was not processed
 * (stopped, held back) to the queue.
 */
export class SqsProcessing {
  private info: Promise<QueueInfo> | undefined;

  constructor(
    readonly settings: ProcessingSettings,
    private readonly events: ConsumerEventEmitter,
  ) {
    // OpenTelemetry: the queue's name, and the trace context in the `traceparent` message attribute
    // or else the `AWSTraceHeader` system attribute (X-Ray), both in `message.headers`.
    this.messaging = {
      system: 'aws_sqs',
      destination: settings.queueUrl.slice(settings.queueUrl.lastIndexOf('/') + 1),
      xrayHeader: (message) => {
        const header = message.headers?.['sqs:AWSTraceHeader'];
        return typeof header === 'string' ? header : undefined;
      },
    };
    events.instrument(this.messaging);
  }

  private readonly messaging: MessagingContext;

  /** The queue's attributes, read once (`fresh` reads them again); a failure (`SQS_QUEUE_UNAVAILABLE`) is not kept. */
  queueInfo(fresh = false): Promise<QueueInfo> {
    if (this.info === undefined || fresh) {
      const info = readQueueInfo(this.settings.client, this.settings.queueUrl);
      this.info = info;
      info.catch(() => {
        if (this.info === info) this.info = undefined;
      });
    }
    return this.info;
  }

  async run(messages: readonly Message[], options: RunOptions = {}): Promise<SqsHandleResult> {
    const errors: InboxError[] = [];
    const report = (error: InboxError) => {
      errors.push(error);
      this.events.emit('error', error);
    };
    if (messages.length === 0) return { results: [], errors };
    const s = this.settings;
    if (options.inFlight !== undefined) this.events.instrument(this.messaging, options.inFlight);
    const receivedAt = options.receivedAt ?? new Date();
    const needsInfo = s.visibilityTimeoutSeconds === undefined || s.fifo === undefined || s.deadLetterQueueUrl === undefined;
    const info = needsInfo ? await this.queueInfo() : undefined;
    const visibilityTimeoutSeconds = s.visibilityTimeoutSeconds ?? info?.visibilityTimeoutSeconds ?? 30;
    const fifo = s.fifo ?? info?.fifo ?? false;
    const calls = new SqsBatchCalls(s.client, s.queueUrl, report, s.deleteAttempts);
    const ctx: SettlementContext = {
      client: s.client,
      queueUrl: s.queueUrl,
      calls,
      deadLetterQueueUrl: s.deadLetterQueueUrl,
      redriveDestination: redriveDestination(info),
      messageIdAttribute: s.mapping.attribute,
      redeliveryBackoff: s.redeliveryBackoff,
      receivedAt,
      events: this.events,
      processor: s.processor,
      report,
      beforeSettle: s.beforeSettle,
    };
    const entries: ReceivedEntry[] = messages.map((message, index) => {
      const mapped = toInboxMessage(message, s.mapping, s.processor.consumer, receivedAt);
      return {
        message,
        index,
        id: mapped.id,
        messageId: mapped.id ?? message.MessageId ?? `#${index}`,
        group: fifo ? messageGroupId(message) : undefined,
        mapped,
      };
    });
    // In flight per delivery, until its own settlement is done (a health probe counts deliveries).
    const finish = new Map<ReceivedEntry, () => void>();
    for (const entry of entries) options.inFlight?.track(new Promise<void>((resolve) => finish.set(entry, resolve)));
    const finished = (list: readonly ReceivedEntry[]) => {
      for (const entry of list) finish.get(entry)?.();
    };

    try {
      const heartbeatMs = s.heartbeatIntervalMs ?? Math.max(500, Math.floor((visibilityTimeoutSeconds * 1000) / 3));
      const heartbeat = new VisibilityHeartbeat(calls, visibilityTimeoutSeconds, heartbeatMs, receivedAt);
      heartbeat.start(entries);
      // FIFO: round k holds the k-th message of every group, so each group advances in order while
      // groups progress side by side; a group whose message is not final sits out the later rounds.
      const blocked = new Map<string, number>();
      try {
        for (const round of fifo ? fifoRounds(entries) : [entries]) {
          const runnable = round.filter((e) => e.group === undefined || !blocked.has(e.group));
          if (runnable.length === 0) continue;
          if (options.signal?.aborted) break;
          const outcomes = await this.runProcessor(runnable, options.signal, report);
          await heartbeat.release(runnable);
          await settle(runnable, outcomes, ctx);
          finished(runnable);
          for (const entry of runnable) {
            if (entry.group !== undefined && entry.final !== true) blocked.set(entry.group, entry.result?.visibilityTimeoutSeconds ?? 0);
          }
        }
      } finally {
        await heartbeat.stop();
      }
      await returnUnprocessed(entries, blocked, calls, receivedAt);
      return { results: entries.map((e) => e.result!), errors };
    } finally {
      finished(entries);
    }
  }

  /**
   * Runs the processor (through `callProcessor`) on the entries that mapped; adapter-decided
   * outcomes go to its observers. An entry whose call failed (reported) has no outcome.
   */
  private async runProcessor(
    entries: ReceivedEntry[],
    signal: AbortSignal | undefined,
    report: (error: InboxError) => void,
  ): Promise<Array<InboxOutcome | undefined>> {
    const { processor, batchSize } = this.settings;
    const outcomes: Array<InboxOutcome | undefined> = entries.map((e) => (e.mapped.ok ? undefined : e.mapped.outcome));
    for (const outcome of outcomes) if (outcome !== undefined) this.observe(outcome);
    const runnable = entries.map((entry, i) => ({ entry, i })).filter(({ entry }) => entry.mapped.ok);
    const calls = isBatchProcessor(processor) ? chunk(runnable, batchSize) : [runnable];
    await Promise.all(
      calls.map(async (call) => {
        if (call.length === 0) return;
        const messages = call.map(({ entry }) => (entry.mapped as { message: InboxMessage }).message);
        let results: readonly InboxOutcome[];
        try {
          results = await callProcessor(processor, messages, signal, this.events);
        } catch (error) {
          // callProcessor resolves to outcomes whatever the processor does; should it ever fail, these
          // messages are left without an outcome (redelivered after a backoff), the others settle.
          const ids = messages.map((m) => m.id);
          report(
            toSqsError(
              SqsErrorCodes.SETTLE_FAILED,
              `the processor call for ${ids.length} message(s) failed unexpectedly; they are redelivered after a backoff`,
              error,
              {
                messageIds: ids,
              },
            ),
          );
          return;
        }
        call.forEach(({ i }, k) => {
          outcomes[i] = results[k];
        });
      }),
    );
    return outcomes;
  }

  /** Hands an outcome the adapter decided itself to the processor's observers (the outcome recorder, metrics). */
  private observe(outcome: InboxOutcome): void {
    const { processor } = this.settings;
    if (typeof processor.observe !== 'function') return;
    try {
      processor.observe(outcome);
    } catch (error) {
      this.events.logger.warn({ err: error, messageId: outcome.messageId }, `processor.observe threw: ${describeError(error)}`);
    }
  }
}

/**
 * Whatever did not run goes back: behind its group's blocker (same delay, so SQS returns the group
 * in order), or at once when processing was stopped.
 */
async function returnUnprocessed(entries: ReceivedEntry[], blocked: Map<string, number>, calls: SqsBatchCalls, receivedAt: Date): Promise<void> {
  const leftover = entries.filter((e) => e.result === undefined);
  if (leftover.length === 0) return;
  const withSeconds = leftover.map((e) => {
    const held = e.group !== undefined && blocked.has(e.group);
    const seconds = held ? capVisibility(blocked.get(e.group!)!, receivedAt) : 0;
    e.result = { message: e.message, messageId: e.id, outcome: undefined, settlement: held ? 'held-back' : 'released', visibilityTimeoutSeconds: seconds };
    return { ...e, seconds };
  });
  const failed = new Set(
    (await calls.changeVisibility(withSeconds, SqsErrorCodes.VISIBILITY_CHANGE_FAILED, 'returning unprocessed messages to the queue')).map((e) => e.message),
  );
  for (const entry of leftover) if (failed.has(entry.message)) entry.result = { ...entry.result!, settlement: 'failed' };
}

/** Splits FIFO messages into rounds: round k = the k-th message (in receive order) of each group. */
function fifoRounds(entries: ReceivedEntry[]): ReceivedEntry[][] {
  const position = new Map<string, number>();
  const rounds: ReceivedEntry[][] = [];
  for (const entry of entries) {
    const key = entry.group ?? `\u0000${entry.index}`;
    const k = position.get(key) ?? 0;
    position.set(key, k + 1);
    const round = rounds[k] ?? [];
    rounds[k] = round;
    round.push(entry);
  }
  return rounds;
}

function chunk<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
