import { isInboxError } from '@inboxed/core';
import type { Options } from 'amqplib';
import { AmqpErrorCodes } from './amqp-errors.js';
import type { ConfirmedPublisher } from './amqp-publisher.js';

/**
 * Header names the copy had to leave out because the original's headers plus inboxed's would not
 * fit amqplib's encoding buffer (a field array of names; the last entry says how many more when
 * the list itself would be too long).
 */
export const HEADERS_DROPPED_HEADER = 'x-inboxed-headers-dropped';

/**
 * The most bytes a copy's encoded header table may take. amqplib encodes a message's properties
 * (headers included) into one fixed 64 KiB buffer and throws when they do not fit; the 4 KiB left
 * over is for the other properties (each at most 255 bytes) and the publish id header.
 */
export const HEADERS_BUDGET_BYTES = 60 * 1024;

/** How many bytes the names in {@link HEADERS_DROPPED_HEADER} may take: a report, not a second copy of the headers. */
const DROPPED_NAMES_BUDGET_BYTES = 2048;

type Headers = Record<string, unknown>;

/**
 * An upper bound of the bytes amqplib's field-table encoding uses for a value (tag included). Numbers
 * are counted as the widest (8 bytes), and a typed value (`{ '!': type, value }`) as its value plus a
 * number's width: never less than the real size, so a copy judged to fit does fit.
 */
function encodedValueSize(value: unknown): number {
  if (typeof value === 'string') return 5 + Buffer.byteLength(value, 'utf8');
  if (Buffer.isBuffer(value)) return 5 + value.length;
  if (Array.isArray(value)) return 5 + value.reduce((sum: number, item) => sum + encodedValueSize(item), 0);
  if (typeof value === 'object' && value !== null) {
    if (Object.hasOwn(value, '!')) return 9 + encodedValueSize((value as { value?: unknown }).value);
    return 1 + encodedTableSize(value as Headers);
  }
  return 9;
}

/** @internal An upper bound of the bytes a header table takes once amqplib encoded it. */
export function encodedTableSize(headers: Headers): number {
  let size = 4;
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) size += 1 + Buffer.byteLength(name, 'utf8') + encodedValueSize(value);
  }
  return size;
}

/** The names for {@link HEADERS_DROPPED_HEADER}, bounded: past the budget, one last entry counts the rest. */
function droppedNamesValue(names: readonly string[]): string[] {
  const listed: string[] = [];
  let bytes = 0;
  for (const name of names) {
    bytes += 5 + Buffer.byteLength(name, 'utf8');
    if (bytes > DROPPED_NAMES_BUDGET_BYTES) break;
    listed.push(name);
  }
  if (listed.length < names.length) listed.push(`... and ${names.length - listed.length} more`);
  return listed;
}

/** @internal A copy's headers, and the original headers left out of them. */
export interface FittedHeaders {
  headers: Headers;
  dropped: string[];
}

/**
 * @internal The headers of a retry or dead-letter copy: the original's plus inboxed's own (`own`
 * wins on a shared name). When they would not fit {@link HEADERS_BUDGET_BYTES}, the largest
 * original headers are left out, one at a time, until they do (or none is left), and
 * {@link HEADERS_DROPPED_HEADER} names them. inboxed's own headers are always kept: they say why
 * the copy exists.
 */
export function fitHeaders(original: Headers | undefined, own: Headers): FittedHeaders {
  const kept: Headers = { ...original };
  for (const name of Object.keys(own)) delete kept[name];
  if (encodedTableSize({ ...kept, ...own }) <= HEADERS_BUDGET_BYTES) return { headers: { ...kept, ...own }, dropped: [] };
  const largestFirst = Object.keys(kept).sort((a, b) => encodedTableSize({ [b]: kept[b] }) - encodedTableSize({ [a]: kept[a] }));
  const dropped: string[] = [];
  for (const name of largestFirst) {
    delete kept[name];
    dropped.push(name);
    const headers = { ...kept, ...own, [HEADERS_DROPPED_HEADER]: droppedNamesValue(dropped) };
    if (encodedTableSize(headers) <= HEADERS_BUDGET_BYTES) return { headers, dropped };
  }
  return { headers: { ...own, [HEADERS_DROPPED_HEADER]: droppedNamesValue(dropped) }, dropped };
}

/** @internal A copy's headers with every original header left out (and named): the last try before giving up on a copy. */
export function withoutOriginalHeaders(original: Headers | undefined, own: Headers): FittedHeaders {
  const dropped = Object.keys(original ?? {}).filter((name) => !Object.hasOwn(own, name));
  return { headers: dropped.length === 0 ? { ...own } : { ...own, [HEADERS_DROPPED_HEADER]: droppedNamesValue(dropped) }, dropped };
}

/** @internal A retry or dead-letter copy: where it goes, its body and properties, the original headers and inboxed's own. */
export interface Copy {
  exchange: string;
  routingKey: string;
  content: Buffer;
  properties: Options.Publish;
  original: Headers | undefined;
  own: Headers;
  messageIds: readonly string[];
}

/**
 * @internal Publishes a copy with its headers fitted to the budget, and when amqplib still cannot
 * encode it (`AMQP_COPY_UNENCODABLE`: an original header value it cannot write back, say), once more
 * with every original header left out. Rejects with `AMQP_COPY_UNENCODABLE` when even that fails.
 */
export async function publishCopy(publisher: ConfirmedPublisher, copy: Copy): Promise<void> {
  const send = (fitted: FittedHeaders) =>
    publisher.publish(copy.exchange, copy.routingKey, copy.content, { ...copy.properties, headers: fitted.headers }, copy.messageIds);
  const fitted = fitHeaders(copy.original, copy.own);
  try {
    await send(fitted);
  } catch (error) {
    const bare = withoutOriginalHeaders(copy.original, copy.own);
    const unencodable = isInboxError(error) && error.code === AmqpErrorCodes.COPY_UNENCODABLE;
    if (!unencodable || bare.dropped.length === fitted.dropped.length) throw error;
    await send(bare);
  }
}
