import { type Message, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { type InboxError, isInboxError } from '@inboxed/core';
import { backoffDelay, type ConsumerEventEmitter } from '@inboxed/core/adapter';
import { callWithTimeout, receiveTimeoutMs } from './sqs-call.js';
import { SqsErrorCodes, toSqsError } from './sqs-errors.js';
import type { ReceiveSettings } from './sqs-options.js';

/** What one poller needs: where to receive from, how, and what to do with what it received. */
export interface PollerContext {
  client: SQSClient;
  queueUrl: string;
  settings: ReceiveSettings;
  /** Requested on each receive; `undefined` keeps the queue's. */
  visibilityTimeoutSeconds: number | undefined;
  events: ConsumerEventEmitter;
  /** Fires on `stop()`: ends the loop and cancels the long poll in progress. */
  signal: AbortSignal;
  /** Processes and settles one receive; resolves when all of it is settled. */
  process(messages: Message[], receivedAt: Date): Promise<unknown>;
  /** A receive failed after succeeding (the first failure of a streak). */
  lost(): void;
  /** A receive succeeded after failing. */
  recovered(): void;
}

/**
 * How long a poller waits after an empty short poll (`waitTimeSeconds: 0`): SQS answers those at
 * once, so without a pause an idle queue would be asked about a thousand times a second.
 */
export const EMPTY_SHORT_POLL_PAUSE_MS = 200;

/**
 * One poller: long-polls the queue and processes each receive before the next, so at most
 * `receiveMaxMessages` deliveries per poller are in flight. A failed receive (a long poll with no
 * answer `RECEIVE_TIMEOUT_MARGIN_MS` past its wait included) is reported (`SQS_RECEIVE_FAILED`) and
 * retried after `receiveBackoff`; the first success after failures emits `reconnect`. An empty short
 * poll is followed by a pause of {@link EMPTY_SHORT_POLL_PAUSE_MS}. A receive whose processing
 * failed, or a turn of the loop that threw where nothing should, is reported and followed by a
 * `receiveBackoff` pause: the loop ends only on `stop()`, never while the consumer says it runs.
 */
export async function poll(ctx: PollerContext): Promise<void> {
  const { signal } = ctx;
  const state: PollState = { failures: 0, lastDelayMs: 0, processingFailures: 0 };
  let broken = 0;
  while (!signal.aborted) {
    try {
      await pollOnce(ctx, state);
      broken = 0;
    } catch (error) {
      if (signal.aborted) return;
      broken++;
      const delayMs = backoffDelay(broken, ctx.settings.receiveBackoff);
      report(ctx, toSqsError(SqsErrorCodes.SETTLE_FAILED, `the poller of ${ctx.queueUrl} failed unexpectedly; it goes on in ${delayMs} ms`, error));
      await abortableSleep(delayMs, signal);
    }
  }
}

interface PollState {
  /** Failed receives in a row. */
  failures: number;
  /** The pause after the last failed receive. */
  lastDelayMs: number;
  /** Receives in a row whose processing failed. */
  processingFailures: number;
}

/** One turn of the poller: a receive, then its processing, or the pause after a failure. */
async function pollOnce(ctx: PollerContext, state: PollState): Promise<void> {
  const { events, signal } = ctx;
  let messages: Message[];
  try {
    messages = await receive(ctx);
  } catch (error) {
    if (signal.aborted) return;
    if (state.failures++ === 0) ctx.lost();
    state.lastDelayMs = backoffDelay(state.failures, ctx.settings.receiveBackoff);
    report(
      ctx,
      toSqsError(SqsErrorCodes.RECEIVE_FAILED, `receive from ${ctx.queueUrl} failed (attempt ${state.failures}, next in ${state.lastDelayMs} ms)`, error, {
        details: { queueUrl: ctx.queueUrl },
      }),
    );
    await abortableSleep(state.lastDelayMs, signal);
    return;
  }
  if (state.failures > 0) {
    const attempt = state.failures;
    state.failures = 0;
    ctx.recovered();
    events.emit('reconnect', { attempt, delayMs: state.lastDelayMs });
  }
  if (messages.length === 0) {
    if (ctx.settings.waitTimeSeconds === 0) await abortableSleep(EMPTY_SHORT_POLL_PAUSE_MS, signal);
    return;
  }
  try {
    await ctx.process(messages, new Date());
    state.processingFailures = 0;
  } catch (error) {
    // Reading the queue's attributes fails as SQS_QUEUE_UNAVAILABLE (the messages were not touched
    // and reappear); anything else is a failure of processing or settling, not an SQS outage. The
    // messages it left unsettled reappear after their visibility timeout.
    state.processingFailures++;
    const delayMs = Math.max(1000, backoffDelay(state.processingFailures, ctx.settings.receiveBackoff));
    report(
      ctx,
      isInboxError(error)
        ? error
        : toSqsError(
            SqsErrorCodes.SETTLE_FAILED,
            `processing a receive of ${messages.length} message(s) failed unexpectedly (not an SQS failure); those not settled reappear after their visibility timeout`,
            error,
            { details: { queueUrl: ctx.queueUrl, sqsMessageIds: messages.map((m) => m.MessageId) } },
          ),
    );
    await abortableSleep(delayMs, signal);
  }
}

/** Emits an `error`; a report that throws (it should not) must not end the loop. */
function report(ctx: PollerContext, error: InboxError): void {
  try {
    ctx.events.emit('error', error);
  } catch {
    // Nothing left to tell it to: the loop goes on.
  }
}

/**
 * One `ReceiveMessage`, aborted by `stop()` or when it outlasts its wait by
 * `RECEIVE_TIMEOUT_MARGIN_MS` (a hung connection would otherwise hold it for the SDK's 15-minute
 * socket timeout, with the consumer looking healthy).
 */
async function receive(ctx: PollerContext): Promise<Message[]> {
  const { waitTimeSeconds } = ctx.settings;
  const command = new ReceiveMessageCommand({
    QueueUrl: ctx.queueUrl,
    MaxNumberOfMessages: ctx.settings.receiveMaxMessages,
    WaitTimeSeconds: waitTimeSeconds,
    VisibilityTimeout: ctx.visibilityTimeoutSeconds,
    MessageAttributeNames: ['All'],
    MessageSystemAttributeNames: ['All'],
    // The deprecated name too: SDKs before MessageSystemAttributeNames existed (the peer range
    // starts at 3.447) drop the new field, and without system attributes FIFO groups are unknown.
    AttributeNames: ['All'],
  });
  const result = await callWithTimeout(
    'ReceiveMessage',
    receiveTimeoutMs(waitTimeSeconds),
    (abortSignal) => ctx.client.send(command, { abortSignal }),
    ctx.signal,
  );
  return result.Messages ?? [];
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
