import { connect } from 'node:net';

/** The PostgreSQL protocol's CancelRequest code (1234 << 16 | 5678). */
const CANCEL_REQUEST_CODE = 80877102;
/**
 * @internal How long a cancel may take to be delivered before it is given up, on either driver: a
 * server that cannot be reached in this time would not have ended the statement any sooner.
 */
export const CANCEL_TIMEOUT_MS = 5_000;

/** The parts of a node-postgres client a cancel is addressed with. */
interface CancellableClient {
  host?: unknown;
  port?: unknown;
  processID?: unknown;
  secretKey?: unknown;
}

/**
 * @internal Asks the server to cancel whatever statement the backend of a node-postgres client is
 * running, with the protocol's CancelRequest (its process id and secret key, on a connection of its
 * own, as `psql`'s Ctrl-C does): exact, unlike `pg_cancel_backend(pid)`, whose pid may belong to
 * another backend by the time it arrives, and it needs neither a pooled connection nor a privilege.
 * An idle backend ignores it.
 *
 * Best effort, and it reports nothing: when it cannot be delivered (a client connected through a
 * custom stream, a server gone), the statement runs until it ends on its own, as it would have
 * without it. Resolves once the server closed the cancel connection, or it failed, or timed out.
 */
export function cancelRunningStatement(client: object): Promise<void> {
  const { host, port, processID, secretKey } = client as CancellableClient;
  if (typeof processID !== 'number' || typeof secretKey !== 'number' || typeof port !== 'number') return Promise.resolve();
  const request = Buffer.alloc(16);
  request.writeInt32BE(16, 0);
  request.writeInt32BE(CANCEL_REQUEST_CODE, 4);
  request.writeInt32BE(processID, 8);
  request.writeInt32BE(secretKey, 12);
  return new Promise((resolve) => {
    const socket =
      typeof host === 'string' && host.startsWith('/')
        ? connect(`${host}/.s.PGSQL.${port}`)
        : connect(port, typeof host === 'string' && host !== '' ? host : 'localhost');
    socket.setTimeout(CANCEL_TIMEOUT_MS, () => socket.destroy());
    socket.once('connect', () => socket.end(request));
    socket.on('error', () => socket.destroy());
    socket.once('close', () => resolve());
    // The server answers nothing; reading lets the socket see its close.
    socket.resume();
  });
}
