import net from 'node:net';

/** A loopback TCP proxy whose connections a test can cut, to simulate a database or broker going away. */
export interface TcpProxy {
  /** Local port to connect to instead of the target. */
  port: number;
  /** Destroys every open connection and refuses new ones until {@link TcpProxy.restore}. */
  cut(): void;
  /** Stops forwarding bytes on open connections without closing them: a hung network. */
  freeze(): void;
  /** Accepts connections again (and forwards again after a freeze). */
  restore(): void;
  close(): Promise<void>;
}

/** Starts a proxy on 127.0.0.1 (random port) forwarding to `targetHost:targetPort`. */
export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  let open = true;
  let frozen = false;
  const server = net.createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    sockets.add(client).add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    // Forward by hand rather than pipe(), so a freeze can hold bytes back.
    client.on('data', (chunk: Buffer) => void (frozen || upstream.write(chunk)));
    upstream.on('data', (chunk: Buffer) => void (frozen || client.write(chunk)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const proxy: TcpProxy = {
    port,
    cut() {
      open = false;
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
    freeze() {
      frozen = true;
    },
    restore() {
      open = true;
      frozen = false;
    },
    close() {
      proxy.cut();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}

/**
 * A proxy in front of the integration PostgreSQL, and the connection URL that goes through it, so
 * a test can cut, freeze and restore the database connection of the pools it builds on that URL.
 */
export async function startPostgresProxy(databaseUrl: string): Promise<{ proxy: TcpProxy; url: string }> {
  const url = new URL(databaseUrl);
  const proxy = await startTcpProxy(url.hostname, Number(url.port || 5432));
  url.port = String(proxy.port);
  return { proxy, url: url.toString() };
}
