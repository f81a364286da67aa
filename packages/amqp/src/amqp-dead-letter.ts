import type { InboxOutcome } from '@inboxed/core';
import { deadLetterHeaders } from '@inboxed/core/adapter';
import type { ConsumeMessage } from 'amqplib';
import { messageIdHeaderOf, publishCopy } from './amqp-header-budget.js';
import { ORIGINAL_QUEUE_HEADER } from './amqp-message.js';
import { copyProperties, type ConfirmedPublisher } from './amqp-publisher.js';
import type { Topology } from './amqp-topology.js';

/** Header naming the exchange the dead-lettered delivery was published to. */
export const ORIGINAL_EXCHANGE_HEADER = 'x-inboxed-original-exchange';
/** Header carrying the routing key the dead-lettered delivery was published with. */
export const ORIGINAL_ROUTING_KEY_HEADER = 'x-inboxed-original-routing-key';

/** @internal The dead-letter target's name on `dead_letter` events: `amqp:<queue>` or `amqp:<exchange>/<routing key>`. */
export function deadLetterDestination(topology: Topology): string {
  const { exchange, routingKey } = topology.deadLetter;
  return exchange === '' ? `amqp:${routingKey}` : `amqp:${exchange}/${routingKey}`;
}

/**
 * @internal Publishes a `dead-letter` or `conflict` outcome's copy to the dead-letter target: the
 * original body and properties, the original headers plus the core's dead-letter headers (reason,
 * error, error code, consumer, message id, attempts) and where it came from. Resolves once the
 * broker confirmed and routed it; only then may the original be acked. Original headers that would
 * not fit amqplib's encoding buffer, or that it cannot encode, are left out (`x-inboxed-headers-dropped`),
 * the reason headers and the message-id header (`idHeader`, the one the consumer reads) never; a copy that cannot be encoded at all rejects with `AMQP_COPY_UNENCODABLE`.
 */
export async function publishDeadLetter(
  publisher: ConfirmedPublisher,
  topology: Topology,
  delivery: ConsumeMessage,
  outcome: InboxOutcome,
  id: string | undefined,
  idHeader: string,
): Promise<void> {
  const own = {
    ...messageIdHeaderOf(idHeader, id),
    ...deadLetterHeaders(outcome),
    [ORIGINAL_QUEUE_HEADER]: topology.queue,
    [ORIGINAL_EXCHANGE_HEADER]: delivery.fields.exchange,
    [ORIGINAL_ROUTING_KEY_HEADER]: delivery.fields.routingKey,
  };
  const { exchange, routingKey } = topology.deadLetter;
  await publishCopy(publisher, {
    exchange,
    routingKey,
    content: delivery.content,
    properties: copyProperties(delivery, id),
    original: delivery.properties.headers,
    own,
    messageIds: [outcome.messageId],
  });
}
