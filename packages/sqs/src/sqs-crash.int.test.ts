import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createOutcomeRecorder } from '@inboxed/core/testing';
import { databaseUrl, requireService, waitFor } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';
import { createQueue, queueDepth, send, sqsTestContext } from './__tests__/sqs-test-kit.js';

const packageRoot = fileURLToPath(new URL('..', import.meta.url));

describe('a consumer process killed between commit and delete', () => {
  const ctx = sqsTestContext();

  it('SIGKILL after the commit, before the delete: the redelivery after the visibility timeout is a duplicate, one effect', async () => {
    const queue = await createQueue(ctx.client, 'crash', { VisibilityTimeout: '2' });
    const dlq = await createQueue(ctx.client, 'crash-dlq');
    await send(ctx.client, queue.url, { to: 'ada' }, { id: 'crash-1' });

    const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', 'test/crash-worker.ts'], {
      cwd: packageRoot,
      env: { ...process.env, SQS_ENDPOINT: requireService('sqsEndpoint'), QUEUE_URL: queue.url, DATABASE_URL: databaseUrl(), SCHEMA: ctx.t.schema },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes('COMMITTED crash-1')) child.kill('SIGKILL');
    });
    try {
      await waitFor(`the worker to commit (stderr: ${stderr})`, () => stdout.includes('COMMITTED crash-1'), 30_000);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    expect(await exited).toBe('SIGKILL');

    // Committed, never deleted: the effect is there and so is the message.
    expect(await ctx.t.countEffects('crash-1')).toBe(1);
    expect(await queueDepth(ctx.client, queue.url)).toBe(1);

    const recorder = createOutcomeRecorder();
    await ctx.start({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url, handler: recorder.wrap(ctx.inbox()) });
    const outcome = await recorder.waitFor('crash-1', { timeoutMs: 15_000 });
    expect(outcome.status).toBe('duplicate');
    expect(outcome.attempt).toBe(2); // ApproximateReceiveCount: the second delivery
    await waitFor('queue empty', async () => (await queueDepth(ctx.client, queue.url)) === 0);
    expect(await ctx.t.countEffects('crash-1')).toBe(1);
    expect(recorder.counts()).toEqual({ duplicate: 1 });
  });
});
