/**
 * A fake payment provider for leased-mode tests: an HTTP server in the test process that charges the
 * way Stripe honours an `Idempotency-Key` header, and that the test can ask how many charges it made.
 *
 *   POST /charges            body `{ amountCents, currency?, reference? }`, header `Idempotency-Key`.
 *                            A new key makes one charge (200, the charge). The same key again returns
 *                            the stored charge (200, `Idempotent-Replayed: true`) and charges nothing;
 *                            the same key with other parameters is refused (400 `idempotency_error`).
 *                            Requests with the same key are served one at a time, so two concurrent
 *                            ones can never both charge. Without a key, every request charges.
 *   GET  /charges?key=<key>  the charge made under that key (200), or 404: how a worker that took a
 *                            claim over finds out whether the previous owner's call got through.
 *
 * `latencyMs` makes each request slow: the charge is made `chargeAt` of the way through (by default
 * halfway), the response comes at the end, so a client killed meanwhile may have charged without
 * knowing. `loseResponses` charges, then drops the connection instead of answering. A client that
 * goes away does not stop a charge once the request arrived (a server does not notice in time); it
 * only ends the wait for the response, so its key is free for the next request at once.
 *
 * Nothing here imports vitest: worker processes use {@link createCharge} and {@link findCharge}.
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One charge as the provider stores and returns it. */
export interface Charge {
  id: string;
  /** The `Idempotency-Key` it was made under (null: none was sent). */
  idempotencyKey: string | null;
  amountCents: number;
  currency: string;
  /** The caller's own reference (an order or message id): what a second charge of one payment would share. */
  reference: string | null;
  /** Milliseconds since the provider started. */
  createdAtMs: number;
}

/** What the provider knows of a request when it decides its latency and whether to lose its response. */
export interface ProviderRequest {
  method: 'POST' | 'GET';
  /** The idempotency key (POST) or the key looked up (GET); null for a POST without one. */
  key: string | null;
  /** 1 for the first request of this method with this key, 2 for the next, ... */
  nth: number;
}

export interface FakePaymentProviderOptions {
  /** How long a request takes, in ms (or per request). Default 0. */
  latencyMs?: number | ((request: ProviderRequest) => number);
  /** Where in a POST's latency the charge is made: 0 at once, 1 just before the response. Default 0.5. */
  chargeAt?: number;
  /** Charge, then drop the connection without a response: for this share of new charges (0 to 1), or where the function says so. */
  loseResponses?: number | ((request: ProviderRequest) => boolean);
}

/** What the provider served, for the test's assertions. */
export interface ProviderStats {
  /** POST requests received (also those whose client went away). */
  posts: number;
  /** POSTs answered with a stored charge (`Idempotent-Replayed: true`). */
  replays: number;
  /** GET lookups. */
  lookups: number;
  /** Charges whose response was dropped on purpose. */
  lostResponses: number;
  /** POSTs refused because the key was reused with other parameters. */
  keyMismatches: number;
}

export interface FakePaymentProvider {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** Charges made under `key`: 0 or 1 with every client that sends a key. */
  chargesFor(key: string): number;
  /** The charge made under `key`. */
  chargeFor(key: string): Charge | undefined;
  /** Every charge, in the order made. */
  charges(): readonly Charge[];
  totalCharges(): number;
  /** Charges per `reference`: two charges of one payment under different keys show up here, not per key. */
  chargesByReference(): Map<string, number>;
  /** Requests per method for one key. */
  requestsFor(key: string): { posts: number; lookups: number };
  stats(): ProviderStats;
  /** Stops listening and drops open connections. */
  close(): Promise<void>;
}

interface ChargeBody {
  amountCents: number;
  currency: string;
  reference: string | null;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => resolve(body));
    req.on('error', reject);
  });
}

function parseChargeBody(text: string): ChargeBody | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'the body is not JSON';
  }
  const { amountCents, currency = 'eur', reference = null } = (value ?? {}) as Record<string, unknown>;
  if (!Number.isInteger(amountCents) || (amountCents as number) <= 0) return 'amountCents must be a positive integer';
  if (typeof currency !== 'string') return 'currency must be a string';
  if (reference !== null && typeof reference !== 'string') return 'reference must be a string';
  return { amountCents: amountCents as number, currency, reference };
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.destroyed) return; // the client went away: nobody to answer
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

/** Starts the provider on 127.0.0.1 and a free port. */
export async function startFakePaymentProvider(options: FakePaymentProviderOptions = {}): Promise<FakePaymentProvider> {
  const latency = (r: ProviderRequest) => Math.max(0, typeof options.latencyMs === 'function' ? options.latencyMs(r) : (options.latencyMs ?? 0));
  const chargeAt = Math.min(1, Math.max(0, options.chargeAt ?? 0.5));
  const lose = (r: ProviderRequest) => (typeof options.loseResponses === 'function' ? options.loseResponses(r) : Math.random() < (options.loseResponses ?? 0));
  const began = performance.now();
  const byKey = new Map<string, { charge: Charge; body: ChargeBody }>();
  const all: Charge[] = [];
  const requests = new Map<string, { posts: number; lookups: number }>();
  const stats: ProviderStats = { posts: 0, replays: 0, lookups: 0, lostResponses: 0, keyMismatches: 0 };
  /** The tail of each key's queue: requests with one key run one after the other. */
  const keyQueues = new Map<string, Promise<void>>();
  let sequence = 0;

  const count = (key: string | null, method: 'posts' | 'lookups'): number => {
    stats[method]++;
    if (key === null) return 1;
    const entry = requests.get(key) ?? { posts: 0, lookups: 0 };
    entry[method]++;
    requests.set(key, entry);
    return entry[method];
  };

  /** Runs `work` after every earlier request with the same key has finished. */
  const serialized = async (key: string | null, work: () => Promise<void>): Promise<void> => {
    if (key === null) return work();
    const previous = keyQueues.get(key) ?? Promise.resolve();
    const current = previous.then(work);
    const tail = current.catch(() => {});
    keyQueues.set(key, tail);
    try {
      await current;
    } finally {
      if (keyQueues.get(key) === tail) keyQueues.delete(key);
    }
  };

  async function postCharge(req: IncomingMessage, res: ServerResponse, gone: AbortSignal): Promise<void> {
    const header = req.headers['idempotency-key'];
    const key = typeof header === 'string' && header !== '' ? header : null;
    const info: ProviderRequest = { method: 'POST', key, nth: count(key, 'posts') };
    const body = parseChargeBody(await readBody(req));
    if (typeof body === 'string') return send(res, 400, { error: { type: 'invalid_request_error', message: body } });
    const total = latency(info);
    await serialized(key, async () => {
      // The request arrived: the charge is made (or found) whether or not the client still waits.
      await sleep(total * chargeAt);
      const stored = key === null ? undefined : byKey.get(key);
      if (stored !== undefined) {
        await sleep(total * (1 - chargeAt), gone);
        if (stored.body.amountCents !== body.amountCents || stored.body.currency !== body.currency || stored.body.reference !== body.reference) {
          stats.keyMismatches++;
          return send(res, 400, {
            error: { type: 'idempotency_error', message: 'Keys for idempotent requests can only be used with the same parameters they were first used with.' },
          });
        }
        stats.replays++;
        return send(res, 200, stored.charge, { 'idempotent-replayed': 'true' });
      }
      const charge: Charge = {
        id: `ch_${(++sequence).toString().padStart(8, '0')}`,
        idempotencyKey: key,
        ...body,
        createdAtMs: Math.round(performance.now() - began),
      };
      all.push(charge);
      if (key !== null) byKey.set(key, { charge, body });
      await sleep(total * (1 - chargeAt), gone);
      if (lose(info)) {
        stats.lostResponses++;
        req.socket.destroy(); // charged, and the client will never know
        return;
      }
      send(res, 200, charge);
    });
  }

  async function getCharge(url: URL, res: ServerResponse, gone: AbortSignal): Promise<void> {
    const key = url.searchParams.get('key');
    if (key === null || key === '') return send(res, 400, { error: { type: 'invalid_request_error', message: 'key is required' } });
    const info: ProviderRequest = { method: 'GET', key, nth: count(key, 'lookups') };
    await sleep(latency(info), gone);
    const stored = byKey.get(key);
    if (stored === undefined) return send(res, 404, { error: { type: 'invalid_request_error', message: 'no charge with this idempotency key' } });
    send(res, 200, stored.charge);
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://provider');
    const going = new AbortController();
    res.on('close', () => going.abort());
    res.on('error', () => {}); // a client that went away mid-answer
    const route =
      url.pathname === '/charges' && req.method === 'POST'
        ? postCharge(req, res, going.signal)
        : url.pathname === '/charges' && req.method === 'GET'
          ? getCharge(url, res, going.signal)
          : Promise.resolve(send(res, 404, { error: { type: 'invalid_request_error', message: 'unknown route' } }));
    route.catch((error: unknown) => send(res, 500, { error: { type: 'api_error', message: String(error) } }));
  });
  server.keepAliveTimeout = 1_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    chargesFor: (key) => all.filter((c) => c.idempotencyKey === key).length,
    chargeFor: (key) => byKey.get(key)?.charge,
    charges: () => [...all],
    totalCharges: () => all.length,
    chargesByReference() {
      const counts = new Map<string, number>();
      for (const charge of all) if (charge.reference !== null) counts.set(charge.reference, (counts.get(charge.reference) ?? 0) + 1);
      return counts;
    },
    requestsFor: (key) => ({ ...(requests.get(key) ?? { posts: 0, lookups: 0 }) }),
    stats: () => ({ ...stats }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A provider's answer that was not a charge (400, 404, 500), with its status. */
export class ProviderError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(`payment provider answered ${status} ${type}: ${message}`);
    this.name = 'ProviderError';
  }
}

/** One HTTP exchange on a connection of its own (a dropped response cannot spoil a pooled socket). */
function exchange(
  url: string,
  init: { method: 'GET' | 'POST'; headers?: Record<string, string>; body?: string; signal?: AbortSignal | undefined },
): Promise<{ status: number; headers: IncomingMessage['headers']; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: init.method, headers: init.headers, agent: false, ...(init.signal ? { signal: init.signal } : {}) }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(init.body);
  });
}

function failure(status: number, body: string): ProviderError {
  try {
    const { error } = JSON.parse(body) as { error: { type: string; message: string } };
    return new ProviderError(status, error.type, error.message);
  } catch {
    return new ProviderError(status, 'unknown', body.slice(0, 200));
  }
}

/**
 * `POST /charges` with `Idempotency-Key: key`: the charge (made now, or the one this key made
 * before: `replayed`). Rejects with {@link ProviderError} on a refusal, and with the socket's error
 * when the response is lost: then the caller cannot know whether it charged.
 */
export async function createCharge(
  baseUrl: string,
  key: string,
  charge: { amountCents: number; currency?: string; reference?: string },
  signal?: AbortSignal,
): Promise<{ charge: Charge; replayed: boolean }> {
  const response = await exchange(`${baseUrl}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(charge),
    signal,
  });
  if (response.status !== 200) throw failure(response.status, response.body);
  return { charge: JSON.parse(response.body) as Charge, replayed: response.headers['idempotent-replayed'] === 'true' };
}

/** `GET /charges?key=`: the charge made under `key`, or undefined when there is none. */
export async function findCharge(baseUrl: string, key: string, signal?: AbortSignal): Promise<Charge | undefined> {
  const response = await exchange(`${baseUrl}/charges?key=${encodeURIComponent(key)}`, { method: 'GET', signal });
  if (response.status === 404) return undefined;
  if (response.status !== 200) throw failure(response.status, response.body);
  return JSON.parse(response.body) as Charge;
}
