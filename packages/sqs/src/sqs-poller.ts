import { type Message, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { isInboxError } from '@inboxed/core';
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
 * poll is followed by a pause of {@link EMPTY_SHORT_POLL_PAUSE_MS}.
 */
export async function poll(ctx: PollerContext): Promise<void> {
  const { events, signal } = ctx;
  let failures = 0;
  let lastDelayMs = 0;
  while (!signal.aborted) {
    let messages: Message[];
    try {
      messages = await receive(ctx);
    } catch (error) {
      if (signal.aborted) return;
      if (failures++ === 0) ctx.lost();
      lastDelayMs = backoffDelay(failures, ctx.settings.receiveBackoff);
      events.emit(
        'error',
        toSqsError(SqsErrorCodes.RECEIVE_FAILED, `receive from ${ctx.queueUrl} failed (attempt ${failures}, next in ${lastDelayMs} ms)`, error, {
          details: { queueUrl: ctx.queueUrl },
        }),
      );
      await abortableSleep(lastDelayMs, signal);
      continue;
    }
    if (failures > 0) {
      ctx.recovered();
      events.emit('reconnect', { attempt: failures, delayMs: lastDelayMs });
      failures = 0;
    }
    if (messages.length === 0) {
      if (ctx.settings.waitTimeSeconds === 0) await abortableSleep(EMPTY_SHORT_POLL_PAUSE_MS, signal);
      continue;
    }
    try {
      await ctx.process(messages, new Date());
    } catch (error) {
      // Only reading the queue's attributes can throw; the messages were not touched and reappear.
      events.emit('error', isInboxError(error) ? error : toSqsError(SqsErrorCodes.QUEUE_UNAVAILABLE, 'processing a receive failed', error));
      await abortableSleep(1000, signal);
    }
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
