import { randomBytes } from 'node:crypto';
import type { ConfirmChannel, ConsumeMessage, Message, Options } from 'amqplib';
import { AmqpErrorCodes, toAmqpError } from './amqp-errors.js';

/** @internal Header that lets a returned (unroutable) copy be matched to its publish. */
export const PUBLISH_ID_HEADER = 'x-inboxed-publish-id';

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
    messageId: p.messageId ?? id,
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
 * @internal Publishes on a confirm channel and resolves only once the broker confirmed the copy AND routed
 * it. Copies are `mandatory`, so a missing retry or dead-letter queue is a failure (the broker
 * returns the message before confirming it) instead of a silent drop after which the original
 * would be acked and lost.
 */
export class ConfirmedPublisher {
  private readonly returned = new Set<string>();
  private readonly prefix = randomBytes(4).toString('hex');
  private sequence = 0;

  constructor(private readonly channel: ConfirmChannel) {
    channel.on('return', (message: Message) => {
      const id = message.properties.headers?.[PUBLISH_ID_HEADER];
      if (typeof id === 'string') this.returned.add(id);
    });
  }

  publish(exchange: string, routingKey: string, content: Buffer, options: Options.Publish, messageIds: readonly string[]): Promise<void> {
    const publishId = `${this.prefix}.${++this.sequence}`;
    const where = { exchange, routingKey };
    return new Promise<void>((resolve, reject) => {
      try {
        this.channel.publish(
          exchange,
          routingKey,
          content,
          { ...options, mandatory: true, headers: { ...options.headers, [PUBLISH_ID_HEADER]: publishId } },
          (error: unknown) => {
            // RabbitMQ sends basic.return before the basic.ack of the same message, so this is settled here.
            const wasReturned = this.returned.delete(publishId);
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
        reject(toAmqpError(AmqpErrorCodes.PUBLISH_FAILED, `publish to ${JSON.stringify(where)} failed`, error, { messageIds, details: where }));
      }
    });
  }
}
