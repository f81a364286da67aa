import net from 'node:net';

/**
 * A Kafka-protocol TCP proxy in front of librdkafka's mock cluster, fixing the one thing of it that
 * kafkajs cannot live with: the mock (librdkafka 2.0.2, Debian's) never sets a controller, and answers
 * Metadata with controller id 0 while its brokers are numbered from 1. kafkajs's idempotent producer
 * asks the controller for a producer id, so against the bare mock it fails with "Broker 0 not found".
 *
 * One listener per mock broker forwards bytes both ways and rewrites two responses only:
 * - Metadata (v0-v6): broker addresses become the proxy's (so clients keep coming through it) and a
 *   controller id that names no broker becomes the first broker's;
 * - FindCoordinator (v0-v2): the coordinator's address becomes the proxy's.
 * Everything else passes through untouched. Requests are read only to remember which API answers
 * which correlation id.
 */

const METADATA = 3;
const FIND_COORDINATOR = 10;

/** A running proxy: the `host:port` list to give clients instead of the mock's. */
export interface KafkaControllerProxy {
  brokers: string;
  close(): Promise<void>;
}

type AddressMap = Map<string, { host: string; port: number }>;

/** Splits a byte stream into size-prefixed Kafka frames. */
function framer(onFrame: (frame: Buffer) => void): (chunk: Buffer) => void {
  let pending: Buffer = Buffer.alloc(0);
  return (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 4) {
      const size = pending.readInt32BE(0);
      if (pending.length < 4 + size) break;
      onFrame(pending.subarray(0, 4 + size));
      pending = pending.subarray(4 + size);
    }
  };
}

/** A cursor over a response body that copies what it reads and lets the caller replace parts. */
class Rewriter {
  private readonly parts: Buffer[] = [];
  constructor(
    private readonly source: Buffer,
    private offset: number,
  ) {}

  int16(): number {
    const value = this.source.readInt16BE(this.offset);
    this.copy(2);
    return value;
  }

  int32(): number {
    const value = this.source.readInt32BE(this.offset);
    this.copy(4);
    return value;
  }

  /** Reads an int32 and writes `replace(value)` instead. */
  replaceInt32(replace: (value: number) => number): void {
    const value = this.source.readInt32BE(this.offset);
    const out = Buffer.alloc(4);
    out.writeInt32BE(replace(value));
    this.parts.push(out);
    this.offset += 4;
  }

  /** A (nullable) int16-length string, copied. */
  string(): string | null {
    const length = this.source.readInt16BE(this.offset);
    if (length < 0) {
      this.copy(2);
      return null;
    }
    const value = this.source.toString('utf8', this.offset + 2, this.offset + 2 + length);
    this.copy(2 + length);
    return value;
  }

  /** Reads a string and writes `value` instead. */
  replaceString(value: string): void {
    const length = this.source.readInt16BE(this.offset);
    const bytes = Buffer.from(value, 'utf8');
    const out = Buffer.alloc(2 + bytes.length);
    out.writeInt16BE(bytes.length);
    bytes.copy(out, 2);
    this.parts.push(out);
    this.offset += 2 + Math.max(0, length);
  }

  /** Peeks an address (a host string followed by an int32 port) without consuming it. */
  peekAddress(): string {
    const length = Math.max(0, this.source.readInt16BE(this.offset));
    const host = this.source.toString('utf8', this.offset + 2, this.offset + 2 + length);
    return `${host}:${this.source.readInt32BE(this.offset + 2 + length)}`;
  }

  /** The whole frame, size prefix recomputed, with the rest of the source copied as is. */
  finish(): Buffer {
    this.copy(this.source.length - this.offset);
    const body = Buffer.concat(this.parts);
    const size = Buffer.alloc(4);
    size.writeInt32BE(body.length - 4);
    return Buffer.concat([size, body.subarray(4)]);
  }

  private copy(bytes: number): void {
    this.parts.push(this.source.subarray(this.offset, this.offset + bytes));
    this.offset += bytes;
  }
}

/** Replaces an address (host string then port int32) at the cursor with the proxy's, when known. */
function rewriteAddress(cursor: Rewriter, addresses: AddressMap): void {
  const mapped = addresses.get(cursor.peekAddress());
  if (mapped === undefined) {
    cursor.string();
    cursor.int32();
    return;
  }
  cursor.replaceString(mapped.host);
  cursor.replaceInt32(() => mapped.port);
}

function rewriteMetadata(frame: Buffer, version: number, addresses: AddressMap): Buffer {
  const cursor = new Rewriter(frame, 0);
  cursor.int32(); // size, recomputed by finish()
  cursor.int32(); // correlation id
  if (version >= 3) cursor.int32(); // throttle_time_ms
  const brokers = cursor.int32();
  const nodeIds: number[] = [];
  for (let i = 0; i < brokers; i++) {
    nodeIds.push(cursor.int32());
    rewriteAddress(cursor, addresses);
    if (version >= 1) cursor.string(); // rack
  }
  if (version >= 2) cursor.string(); // cluster_id
  if (version >= 1) cursor.replaceInt32((controller) => (nodeIds.includes(controller) || nodeIds.length === 0 ? controller : Math.min(...nodeIds)));
  return cursor.finish();
}

function rewriteFindCoordinator(frame: Buffer, version: number, addresses: AddressMap): Buffer {
  const cursor = new Rewriter(frame, 0);
  cursor.int32();
  cursor.int32();
  if (version >= 1) cursor.int32(); // throttle_time_ms
  cursor.int16(); // error_code
  if (version >= 1) cursor.string(); // error_message
  cursor.int32(); // node_id
  rewriteAddress(cursor, addresses);
  return cursor.finish();
}

/** Starts one listener per broker of `brokers` (`host:port,...`, the mock's bootstrap list). */
export async function startKafkaControllerProxy(brokers: string): Promise<KafkaControllerProxy> {
  const upstreams = brokers.split(',').map((entry) => {
    const at = entry.lastIndexOf(':');
    return { host: entry.slice(0, at), port: Number(entry.slice(at + 1)) };
  });
  const addresses: AddressMap = new Map();
  const servers: net.Server[] = [];
  const sockets = new Set<net.Socket>();
  for (const upstream of upstreams) {
    const server = net.createServer((client) => {
      const broker = net.connect(upstream.port, upstream.host);
      sockets.add(client).add(broker);
      const apis = new Map<number, { key: number; version: number }>();
      const close = () => {
        client.destroy();
        broker.destroy();
        sockets.delete(client);
        sockets.delete(broker);
      };
      client.on('error', close).on('close', close);
      broker.on('error', close).on('close', close);
      client.on(
        'data',
        framer((frame) => {
          apis.set(frame.readInt32BE(8), { key: frame.readInt16BE(4), version: frame.readInt16BE(6) });
          broker.write(frame);
        }),
      );
      broker.on(
        'data',
        framer((frame) => {
          const correlation = frame.readInt32BE(4);
          const api = apis.get(correlation);
          apis.delete(correlation);
          let out = frame;
          if (api?.key === METADATA && api.version <= 6) out = rewriteMetadata(frame, api.version, addresses);
          else if (api?.key === FIND_COORDINATOR && api.version <= 2) out = rewriteFindCoordinator(frame, api.version, addresses);
          client.write(out);
        }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push(server);
    addresses.set(`${upstream.host}:${upstream.port}`, { host: '127.0.0.1', port: (server.address() as net.AddressInfo).port });
  }
  return {
    brokers: upstreams
      .map((u) => addresses.get(`${u.host}:${u.port}`)!)
      .map((a) => `${a.host}:${a.port}`)
      .join(','),
    async close() {
      for (const socket of sockets) socket.destroy();
      await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    },
  };
}
