/**
 * A stand-in for a node-postgres `Pool` that answers every statement from memory, one event-loop
 * turn later, as a socket read would. Not a database: it accepts whatever it is sent. The core suite
 * runs the same handler bare and under withInbox on it to time the JavaScript alone (inboxed's,
 * Drizzle's, the benchmark's), with no driver parsing, no socket writes and no PostgreSQL sharing the
 * CPU; the real lines' Node CPU minus this is what the driver and the kernel add.
 *
 * It knows the statements withInbox sends on node-postgres (see InboxStore.claimText/verifyText):
 * BEGIN with the claim (it answers that every id was claimed), the completion check with COMMIT
 * (verdict 0: the rows are there), and the one-time look at the inbox table (pinSchema).
 */
type Result = { command: string; rows: Record<string, unknown>[]; rowCount: number; fields: never[] };

const result = (command: string, rows: Record<string, unknown>[] = []): Result => ({ command, rows, rowCount: rows.length, fields: [] });

/** The answer to one query, as node-postgres would give it (an array for a multi-statement simple query). */
function answer(schema: string, query: unknown): Result | Result[] {
  const text = typeof query === 'string' ? query : (query as { text: string }).text;
  if (text.startsWith('select n.nspname')) return result('SELECT', [{ schema, kind: 'r' }]);
  if (text.startsWith('select ctid')) return result('SELECT');
  if (/^begin[ ;]/.test(text)) {
    // The claim's ids are the quoted literals that look like message ids (`m-<n>`).
    const ids = [...text.matchAll(/'(m-\d+)'/g)].map((match) => match[1]);
    return [
      result('BEGIN'),
      result(
        'INSERT',
        ids.map((id, i) => ({ message_id: id, tid: `(0,${i + 1})` })),
      ),
    ];
  }
  if (text.endsWith('; commit')) {
    const checked = [result('SELECT', [{ verdict: 0 }]), result('COMMIT')];
    return text.startsWith('select set_config') ? [result('SELECT'), ...checked] : checked;
  }
  const command = text.split(/\s/, 1)[0]!.toUpperCase();
  return result(command === 'INSERT' ? 'INSERT' : command);
}

const later = <T>(value: T): Promise<T> => new Promise((resolve) => setImmediate(() => resolve(value)));

class InMemoryClient {
  constructor(private readonly schema: string) {}
  query(query: unknown, values?: unknown, callback?: (error: null, result: unknown) => void): Promise<unknown> | undefined {
    const done = typeof values === 'function' ? (values as typeof callback) : callback;
    const value = answer(this.schema, query);
    if (done !== undefined) {
      setImmediate(() => done(null, value));
      return undefined;
    }
    return later(value);
  }
  escapeLiteral(value: string): string {
    return `'${value.replaceAll("'", "''")}'`;
  }
  on(): this {
    return this;
  }
  removeListener(): this {
    return this;
  }
  release(): void {}
}

/** The pool: `drizzle(new InMemoryPool(schema))` (named `...Pool`, as Drizzle checks for a pool by name). */
export class InMemoryPool {
  readonly totalCount = 0;
  constructor(private readonly schema: string) {}
  query(query: unknown): Promise<unknown> {
    return later(answer(this.schema, query));
  }
  async connect(): Promise<InMemoryClient> {
    return new InMemoryClient(this.schema);
  }
  on(): this {
    return this;
  }
}
