import { type Message, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { isInboxError } from '@inboxed/core';
import { backoffDelay, type ConsumerEventEmitter } from '@inboxed/core/adapter';
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
 * One poller: long-polls the queue and processes each receive before the next, so at most
 * `receiveMaxMessages` deliveries per poller are in flight. A failed receive is reported
 * (`SQS_RECEIVE_FAILED`) and retried after `receiveBackoff`; the first success after failures
 * emits `reconnect`.
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
    if (messages.length === 0) continue;
    try {
      await ctx.process(messages, new Date());
    } catch (error) {
      // Only reading the queue's attributes can throw; the messages were not touched and reappear.
      events.emit('error', isInboxError(error) ? error : toSqsError(SqsErrorCodes.QUEUE_UNAVAILABLE, 'processing a receive failed', error));
      await abortableSleep(1000, signal);
    }
  }
}

async function receive(ctx: PollerContext): Promise<Message[]> {
  const result = await ctx.client.send(
    new ReceiveMessageCommand({
      QueueUrl: ctx.queueUrl,
      MaxNumberOfMessages: ctx.settings.receiveMaxMessages,
      WaitTimeSeconds: ctx.settings.waitTimeSeconds,
      VisibilityTimeout: ctx.visibilityTimeoutSeconds,
      MessageAttributeNames: ['All'],
      MessageSystemAttributeNames: ['All'],
      // The deprecated name too: SDKs before MessageSystemAttributeNames existed (the peer range
      // starts at 3.447) drop the new field, and without system attributes FIFO groups are unknown.
      AttributeNames: ['All'],
    }),
    { abortSignal: ctx.signal },
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
