// withInboxBatch's edge cases, on node-postgres only: they do not depend on the server's version, so
// they stay out of the per-PostgreSQL-major runs (vitest.config.ts) that repeat with-inbox-batch.int.test.ts.
import { describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './__tests__/migrated-database.js';
import { reject, type InboxMessage } from './types.js';
import { withInboxBatch } from './with-inbox-batch.js';
import { withInbox } from './with-inbox.js';

describe('withInboxBatch edges (node-postgres)', () => {
  const database = useMigratedDatabase('node-postgres', { poolSize: 30 });
  const insertAll = async (messages: InboxMessage[], tx: any) => {
    await tx.insert(database.t.effects).values(messages.map((m) => ({ messageId: m.id })));
  };

  it.each<[string, (messages: InboxMessage[]) => unknown, string]>([
    ['an array of rejections', (messages) => messages.map(() => reject('nope')), 'an array'],
    ['a single reject()', () => reject('all'), 'a single reject()'],
    ['a rejection for an id it was not handed', () => ({ typo: reject('x') }), 'not the id of a message it was handed'],
    ['a Map value reject() did not make', (messages) => new Map([[messages[0]!.id, { reason: 'x' }]]), 'that reject() did not make'],
    ['a string', () => 'rejected', 'a string'],
    [
      'a Proxy that throws on every read',
      () =>
        new Proxy(
          {},
          {
            getPrototypeOf: () => {
              throw new Error('trap');
            },
          },
        ),
      'cannot be read',
    ],
  ])('a batch handler returning %s fails the attempt as INVALID_RESULT, counted, and commits nothing', async (_label, returned, says) => {
    const { t } = database;
    const process = withInboxBatch(
      async (messages: InboxMessage[], tx: any) => {
        await insertAll(messages, tx);
        return returned(messages) as never;
      },
      database.options({ maxAttempts: 5 }),
    );
    const outcomes = await process(['a', 'b'].map((id) => ({ id, payload: 1 })));
    expect(outcomes.map((o) => [o.status, o.error?.code])).toEqual([
      ['retry', 'INVALID_RESULT'],
      ['retry', 'INVALID_RESULT'],
    ]);
    expect(outcomes[0]!.error!.message).toContain(says);
    expect(await t.query(`select count(*)::int as n from "${t.schema}".effects`)).toEqual([{ n: 0 }]);
    expect(await t.query(`select message_id, attempts from "${t.schema}".inbox_attempts order by 1`)).toEqual([
      { message_id: 'a', attempts: 1 },
      { message_id: 'b', attempts: 1 },
    ]);
  });

  it('a Map of rejections and a null-prototype record are read; a Proxy of a Map cannot be, and says so', async () => {
    const shapes = [
      (messages: InboxMessage[]) => new Map([[messages[0]!.id, reject('by map')]]),
      (messages: InboxMessage[]) => Object.assign(Object.create(null) as object, { [messages[1]!.id]: reject('by record') }),
      (messages: InboxMessage[]) => new Proxy(new Map([[messages[0]!.id, reject('by proxy')]]), {}),
    ];
    const outcomes = [];
    for (const [i, shape] of shapes.entries()) {
      const process = withInboxBatch(
        async (messages: InboxMessage[], tx: any) => {
          await insertAll(messages, tx);
          return shape(messages) as never;
        },
        database.options({ consumer: `shape-${i}` }),
      );
      outcomes.push((await process(['a', 'b'].map((id) => ({ id, payload: 1 })))).map((o) => `${o.status}/${o.reason}`));
    }
    expect(outcomes).toEqual([
      ['rejected/by map', 'processed/undefined'],
      ['processed/undefined', 'rejected/by record'],
      ['retry/handler-failed', 'retry/handler-failed'],
    ]);
  });

  it('6 ids of a batch of 200 held by concurrent deliveries: only those retry, every other message commits', async () => {
    const { t } = database;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered = 0;
    const single = withInbox(async (message: InboxMessage, tx: any) => {
      await tx.insert(t.effects).values({ messageId: message.id });
      entered++;
      await gate;
    }, database.options());
    const ids = Array.from({ length: 200 }, (_, i) => `m${String(i).padStart(3, '0')}`);
    const busy = ids.filter((_, i) => i % 33 === 7);
    const singles = busy.map((id) => single({ id, payload: 1 }));
    while (entered < busy.length) await new Promise((resolve) => setTimeout(resolve, 10));
    const outcomes = await withInboxBatch(insertAll, database.options({ lockTimeoutMs: 2000 }))(ids.map((id) => ({ id, payload: 1 })));
    release();
    await Promise.all(singles);
    expect(outcomes.filter((o) => !busy.includes(o.messageId) && o.status !== 'processed')).toEqual([]);
    expect(outcomes.filter((o) => busy.includes(o.messageId)).map((o) => `${o.status}/${o.reason}`)).toEqual(busy.map(() => 'retry/in-progress'));
    expect(await t.query(`select count(*)::int as n from "${t.schema}".effects`)).toEqual([{ n: 200 }]);
  });
});
