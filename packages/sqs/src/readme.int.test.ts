import { fileURLToPath } from 'node:url';
import { databaseUrl, startQuickStart, waitFor, withSearchPath } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { deadLettersOf, sqsTestContext } from '../test/sqs-test-kit.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));

// The README's quick start, exactly as written, in its own process, configured only by env vars.
describe('the README quick start', () => {
  const ctx = sqsTestContext();

  it('runs against the emulator and a fresh database: one row per id, invalid payloads dead-lettered, clean SIGTERM', async () => {
    const h = await ctx.queues();
    const app = await startQuickStart({
      readme: `${packageDir}README.md`,
      packageDir,
      env: {
        DATABASE_URL: withSearchPath(databaseUrl(), ctx.t.schema),
        SQS_ENDPOINT: h.endpoint,
        QUEUE_URL: h.queueUrl,
        DEAD_LETTER_QUEUE_URL: h.deadLetterQueueUrl!,
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'test',
        AWS_SECRET_ACCESS_KEY: 'test',
      },
      readyLine: 'consuming notifications',
    });
    try {
      await h.send({ userId: 'ada' }, { id: 'n-1' });
      await h.send({ userId: 'ada' }, { id: 'n-1' }); // a producer retry
      await h.send({ user: 'nobody' }, { id: 'n-2' });
      await app.waitForOutput('processed n-1');
      expect(await deadLettersOf(h)).toHaveLength(1);
      await waitFor('queue drained', async () => (await h.pending()) === 0);
      expect(await ctx.t.query(`select message_id, user_id from "${ctx.t.schema}".notifications_sent`)).toEqual([{ message_id: 'n-1', user_id: 'ada' }]);
    } finally {
      expect(await app.stop()).toBe(0);
    }
  });
});
