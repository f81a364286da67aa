import { randomBytes } from 'node:crypto';
import type { ConfirmChannel, ConsumeMessage, Message, Options } from 'amqplib';
import type { InboxError } from '@inboxed/core';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';

/** @internal Header that lets a returned (unroutable) copy be matched to its publish. */
export const PUBLISH_ID_HEADER = 'x-inboxed-publish-id';

/** The longest value of an AMQP `shortstr` property (message id, correlation id, ...), in bytes. */
const MAX_SHORTSTR_BYTES = 255;

/**
 * @internal Properties of a retry or dead-letter copy: the original's, with the message id set as
 * `properties.messageId` (even when the original had it in a header, so a replay keeps it), minus
 * the two that would break or shorten the copy's life.
 */
export function copyProperties(delivery: ConsumeMessage, id: string | undefined): Options.Publish {
  const p = delivery.properties;
  const copy: Options.Publish = {
    contentType: p.contentType,
    contentEncoding: p.contentEncoding,
    // The copy is the only one left once the original is acked: keep it on disk.
    persistent: true,
    priority: p.priority,
    correlationId: p.correlationId,
    replyTo: p.replyTo,
    // A header id longer than a property can hold (255 bytes) stays only in its header.
    messageId: p.messageId ?? (id !== undefined && Buffer.byteLength(id, 'utf8') <= MAX_SHORTSTR_BYTES ? id : undefined),
    timestamp: p.timestamp,
    type: p.type,
    appId: p.appId,
    // Not copied: `expiration` (the copy must not expire in a retry or dead-letter queue) and
    // `userId` (the broker rejects a user id other than the publishing connection's).
  };
  for (const key of Object.keys(copy) as (keyof Options.Publish)[]) if (copy[key] === undefined) delete copy[key];
  return copy;
}

/**
 * @internal Replaces a confirm channel that can no longer be trusted: stops watching it, closes it
 * and opens a fresh one (`undefined`: there is none to open, copies cannot be published any more).
 */
export type ReplacePublishChannel = (broken: ConfirmChannel) => Promise<ConfirmChannel | undefined>;

/**
 * Without a connection to open another channel on (`createAmqpMessageHandler`): publish no more, but
 * leave the channel open. It is the user's, and often the very channel the deliveries are consumed on.
 */
const noReplacement: ReplacePublishChannel = async () => undefined;

/**
 * How many confirm callbacks amqplib holds for `channel` (its internal `unconfirmed` array, in 0.10
 * as in 2.x), or undefined when this amqplib has no such array.
 */
function confirmCallbacks(channel: ConfirmChannel): number | undefined {
  const unconfirmed = (channel as unknown as { unconfirmed?: unknown }).unconfirmed;
  return Array.isArray(unconfirmed) ? unconfirmed.length : undefined;
}

/** amqplib throws these when a message cannot be encoded (too large a header table, a property too long or of the wrong type). */
function isEncodingError(error: unknown): boolean {
  return error instanceof RangeError || error instanceof TypeError;
}

/**
 * @internal Publishes on a confirm channel and resolves only once the broker confirmed the copy AND routed
 * it. Copies are `mandatory`, so a missing retry or dead-letter queue is a failure (the broker
 * returns the message before confirming it) instead of a silent drop after which the original
 * would be acked and lost.
 *
 * A `publish` that throws (a copy amqplib cannot encode; copies are fitted with amqplib's own
 * encoder first, so header values do not make it throw) rejects that copy with
 * `AMQP_COPY_UNENCODABLE`. The channel is kept when the throw left no confirm callback behind
 * (amqplib 2.x registers it after encoding). Only when amqplib did register one (0.10 registers it
 * before encoding, so a callback for a message never sent would take every later confirm, and a
 * nacked copy would be taken as confirmed, its original acked and lost) is the channel given up:
 * whatever still awaited a confirm on it fails (`AMQP_PUBLISH_FAILED`: those originals are
 * requeued, never acked), and later copies go through a fresh channel from `replace` (which closes
 * the broken one when it owns it), or, without one (`createAmqpMessageHandler`: the channel is the
 * user's, left open), fail with `AMQP_PUBLISH_FAILED`.
 */
export class ConfirmedPublisher {
  private readonly returned = new Set<string>();
  private readonly prefix = randomBytes(4).toString('hex');
  private sequence = 0;
  private channel: ConfirmChannel;
  /** Rejecters of the publishes on the current channel still waiting for their confirm, by publish id. */
  private readonly awaiting = new Map<string, (error: InboxError) => void>();
  /** Set while a broken channel is being replaced: publishes wait for it. */
  private replacing: Promise<void> | undefined;
  /** Why no copy can be published any more (no channel could replace a broken one). */
  private unusable: InboxError | undefined;
  private closed = false;
  private readonly onReturn = (message: Message) => {
    const id = message.properties.headers?.[PUBLISH_ID_HEADER];
    if (typeof id === 'string') this.returned.add(id);
  };

  constructor(
    channel: ConfirmChannel,
    private readonly replace: ReplacePublishChannel = noReplacement,
  ) {
    this.channel = channel;
    channel.on('return', this.onReturn);
  }

  /** The confirm channel copies currently go through (a fresh one after a publish threw). */
  get currentChannel(): ConfirmChannel {
    return this.channel;
  }

  /** Closes the current channel (and any that a replacement still in progress opens). */
  async close(): Promise<void> {
    this.closed = true;
    await this.replacing;
    await this.channel.close();
  }

  async publish(exchange: string, routingKey: string, content: Buffer, options: Options.Publish, messageIds: readonly string[]): Promise<void> {
    if (this.replacing !== undefined) await this.replacing;
    if (this.unusable !== undefined) throw this.unusable;
    return this.publishOn(this.channel, exchange, routingKey, content, options, messageIds);
  }

  private publishOn(
    channel: ConfirmChannel,
    exchange: string,
    routingKey: string,
    content: Buffer,
    options: Options.Publish,
    messageIds: readonly string[],
  ): Promise<void> {
    const publishId = `${this.prefix}.${++this.sequence}`;
    const where = { exchange, routingKey };
    return new Promise<void>((resolve, reject) => {
      this.awaiting.set(publishId, reject);
      const callbacksBefore = confirmCallbacks(channel);
      try {
        channel.publish(
          exchange,
          routingKey,
          content,
          { ...options, mandatory: true, headers: { ...options.headers, [PUBLISH_ID_HEADER]: publishId } },
          (error: unknown) => {
            // RabbitMQ sends basic.return before the basic.ack of the same message, so this is settled here.
            const wasReturned = this.returned.delete(publishId);
            // Not awaited any more: failed when its channel was given up, whatever this callback says.
            if (!this.awaiting.delete(publishId)) return;
            if (error !== null && error !== undefined) {
              reject(
                toAmqpError(AmqpErrorCodes.PUBLISH_FAILED, `publish to ${JSON.stringify(where)} was not confirmed`, error, { messageIds, details: where }),
              );
            } else if (wasReturned) {
              reject(
                toAmqpError(
                  AmqpErrorCodes.UNROUTABLE,
                  `publish to ${JSON.stringify(where)} was returned as unroutable (missing queue or binding?)`,
                  undefined,
                  { messageIds, details: where },
                ),
              );
            } else {
              resolve();
            }
          },
        );
      } catch (error) {
        this.awaiting.delete(publishId);
        const code = isEncodingError(error) ? AmqpErrorCodes.COPY_UNENCODABLE : AmqpErrorCodes.PUBLISH_FAILED;
        reject(toAmqpError(code, `publish to ${JSON.stringify(where)} failed`, error, { messageIds, details: where }));
        // No confirm can arrive between the two reads (the same tick): a longer array is our stale callback.
        const callbacksAfter = confirmCallbacks(channel);
        const staleCallback = callbacksBefore === undefined || callbacksAfter === undefined || callbacksAfter > callbacksBefore;
        if (staleCallback) this.giveUp(channel, error);
      }
    });
  }

  /** After a publish threw on `channel`: fails what awaits its confirms, and replaces it (once). */
  private giveUp(channel: ConfirmChannel, cause: unknown): void {
    if (channel !== this.channel || this.replacing !== undefined) return;
    const failure = toAmqpError(
      AmqpErrorCodes.PUBLISH_FAILED,
      'a publish on the confirm channel threw, so its confirms can no longer be matched to their copies; copies awaiting one count as not confirmed',
      cause,
    );
    for (const reject of this.awaiting.values()) reject(failure);
    this.awaiting.clear();
    channel.off('return', this.onReturn);
    this.replacing = this.replaceChannel(channel, failure).finally(() => {
      this.replacing = undefined;
    });
  }

  private async replaceChannel(broken: ConfirmChannel, failure: InboxError): Promise<void> {
    let fresh: ConfirmChannel | undefined;
    try {
      fresh = await this.replace(broken);
    } catch (error) {
      this.unusable = toAmqpError(AmqpErrorCodes.PUBLISH_FAILED, 'could not open a new confirm channel for copies', error);
      return;
    }
    if (fresh === undefined) {
      this.unusable = toAmqpError(
        AmqpErrorCodes.PUBLISH_FAILED,
        'a publish threw after amqplib had registered its confirm callback (amqplib 0.10), so confirms on the publish channel can no longer be matched to their copies; no more copies are published on it (the channel is left open): give the handler a new confirm channel',
        failure.cause, // not `failure` itself: an error of the same code would be returned as it is
      );
      return;
    }
    if (this.closed) {
      fresh.close().catch(() => undefined);
      return;
    }
    this.channel = fresh;
    fresh.on('return', this.onReturn);
  }
}
