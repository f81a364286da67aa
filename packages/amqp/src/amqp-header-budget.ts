import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { isInboxError, MAX_MESSAGE_ID_BYTES } from '@inboxed/core';
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

/** amqplib's field-table encoder (`lib/codec.js`, in 0.10 as in 2.x): writes a table at `offset`, returns the bytes written. */
type EncodeTable = (buffer: Buffer, value: unknown, offset: number) => number;

/**
 * amqplib's own encoder, loaded from the amqplib this package resolves (the one whose channels
 * encode the copies), or `null` when it cannot be loaded: sizes are then the conservative estimate.
 */
let encoder: EncodeTable | null | undefined;
function amqplibEncoder(): EncodeTable | null {
  if (encoder !== undefined) return encoder;
  encoder = null;
  try {
    const require = createRequire(import.meta.url);
    // `lib/codec.js` is not in amqplib 2.x's `exports`: load it by path, next to the package's main file.
    const codec = require(join(dirname(require.resolve('amqplib')), 'lib', 'codec.js')) as { encodeTable?: unknown };
    if (typeof codec.encodeTable === 'function') encoder = codec.encodeTable as EncodeTable;
  } catch {
    // an amqplib without lib/codec.js: keep the estimate
  }
  return encoder;
}

/** @internal Test hook: use amqplib's encoder (`true`, the default) or the conservative estimate (`false`). */
export function useAmqplibEncoder(use: boolean): void {
  encoder = use ? undefined : null;
}

/** Where one header is encoded to be measured: one larger than the budget cannot fit a copy anyway, so this need not be larger. */
let scratch: Buffer | undefined;

/**
 * An upper bound of the bytes amqplib's field-table encoding uses for a value (tag included). Numbers
 * are counted as the widest (8 bytes), and a typed value (`{ '!': type, value }`) as its value plus a
 * number's width: never less than the real size. Only used when amqplib's encoder cannot be loaded.
 */
function estimatedValueSize(value: unknown): number {
  if (typeof value === 'string') return 5 + Buffer.byteLength(value, 'utf8');
  if (Buffer.isBuffer(value)) return 5 + value.length;
  if (Array.isArray(value)) return 5 + value.reduce((sum: number, item) => sum + estimatedValueSize(item), 0);
  if (typeof value === 'object' && value !== null) {
    if (Object.hasOwn(value, '!')) return 9 + estimatedValueSize((value as { value?: unknown }).value);
    return 1 + estimatedTableSize(value as Headers);
  }
  return 9;
}

function estimatedTableSize(headers: Headers): number {
  let size = 4;
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) size += 1 + Buffer.byteLength(name, 'utf8') + estimatedValueSize(value);
  }
  return size;
}

/**
 * The bytes one header (name and value) takes in an encoded field table: exactly what amqplib
 * writes, or the conservative estimate when its encoder is not available. `Infinity` when amqplib
 * cannot encode it at all (a double <= -2^63 is typed as a long and refused, a name over 255 bytes,
 * ...) or it alone exceeds {@link HEADERS_BUDGET_BYTES}: such a header never fits a copy.
 */
export function encodedHeaderSize(name: string, value: unknown): number {
  if (value === undefined) return 0;
  const encode = amqplibEncoder();
  if (encode === null) return estimatedTableSize({ [name]: value }) - 4;
  scratch ??= Buffer.alloc(HEADERS_BUDGET_BYTES + 4096);
  try {
    const size = encode(scratch, { [name]: value }, 0) - 4;
    return size > HEADERS_BUDGET_BYTES ? Number.POSITIVE_INFINITY : size;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

/** @internal The bytes a header table takes once amqplib encoded it (exact, or an upper bound without amqplib's encoder). */
export function encodedTableSize(headers: Headers): number {
  let size = 4;
  for (const name of Object.keys(headers)) size += encodedHeaderSize(name, headers[name]);
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

/**
 * Room kept for {@link HEADERS_DROPPED_HEADER} once a header has to be dropped: its name, the array's
 * tag and length, the listed names (at most {@link DROPPED_NAMES_BUDGET_BYTES}) and the "... and N more" entry.
 */
const DROPPED_HEADER_RESERVE_BYTES = 1 + HEADERS_DROPPED_HEADER.length + 1 + 4 + DROPPED_NAMES_BUDGET_BYTES + 64;

/** @internal A copy's headers, and the original headers left out of them. */
export interface FittedHeaders {
  headers: Headers;
  dropped: string[];
}

/**
 * @internal The message-id header a copy carries among inboxed's own headers (never dropped): the
 * header the consumer reads the id from (`messageId.header`) set to the id the delivery was
 * processed under, so the copy comes back under the same id whatever original headers are left out,
 * and whatever `properties.messageId` says. None without an id, or with one the core refuses as
 * too long (that message is dead-lettered as `invalid-message-id`; its header is an ordinary one).
 */
export function messageIdHeaderOf(header: string, id: string | undefined): Headers {
  return id === undefined || id === '' || Buffer.byteLength(id, 'utf8') > MAX_MESSAGE_ID_BYTES ? {} : { [header]: id };
}

/**
 * @internal The headers of a retry or dead-letter copy: the original's plus inboxed's own (`own`
 * wins on a shared name; the message-id header is one of them, see {@link messageIdHeaderOf}). An
 * original header amqplib cannot encode is left out; when the rest would not fit
 * {@link HEADERS_BUDGET_BYTES}, the largest original headers are left out until they do (or none is
 * left), and {@link HEADERS_DROPPED_HEADER} names what was left out. inboxed's own headers are always
 * kept: they say why the copy exists and under which id. Each header's size is computed once (with
 * amqplib's own encoder) and the drops are one pass over the headers sorted once.
 */
export function fitHeaders(original: Headers | undefined, own: Headers): FittedHeaders {
  const names = Object.keys(original ?? {}).filter((name) => !Object.hasOwn(own, name));
  const sizes = new Map<string, number>();
  const dropped = new Set<string>();
  let total = encodedTableSize(own);
  for (const name of names) {
    const size = encodedHeaderSize(name, original![name]);
    sizes.set(name, size);
    if (size === Number.POSITIVE_INFINITY)
      dropped.add(name); // cannot be written at all: always left out
    else total += size;
  }
  if (dropped.size === 0 && total <= HEADERS_BUDGET_BYTES) return { headers: { ...original, ...own }, dropped: [] };
  const largestFirst = [...names].sort((a, b) => (sizes.get(b) === sizes.get(a) ? 0 : sizes.get(b)! > sizes.get(a)! ? 1 : -1));
  const target = HEADERS_BUDGET_BYTES - DROPPED_HEADER_RESERVE_BYTES;
  for (const name of largestFirst) {
    if (total <= target) break;
    if (dropped.has(name)) continue;
    dropped.add(name);
    total -= sizes.get(name)!;
  }
  const headers: Headers = {};
  for (const name of names) if (!dropped.has(name)) headers[name] = original![name];
  // Named unencodable and largest first, as they were left out.
  const droppedNames = largestFirst.filter((name) => dropped.has(name));
  return { headers: { ...headers, ...own, [HEADERS_DROPPED_HEADER]: droppedNamesValue(droppedNames) }, dropped: droppedNames };
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
