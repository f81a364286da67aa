import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { databaseUrl } from '@inboxed/test-support';
import { describe, expect, it } from 'vitest';

const exampleRoot = fileURLToPath(new URL('../../../examples/sqs-notifications/', import.meta.url));

// Keeps examples/sqs-notifications from rotting: its self-contained mode (own fauxqs, demo messages)
// must end with the documented counts.
describe('examples/sqs-notifications', () => {
  it('runs end to end on its own emulator: 3 notifications recorded, 1 duplicate, 1 retry, 2 dead-letters', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: databaseUrl() };
    delete env.SQS_ENDPOINT;
    delete env.QUEUE_URL;
    delete env.DEAD_LETTER_QUEUE_URL;
    const child = spawn(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', 'src/main.ts'], {
      cwd: exampleRoot,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));

    expect(output, output).toContain('processed=3 duplicate=1 retry=1 dead-letter=2; notifications_sent rows for this run: 3');
    expect(output).not.toMatch(/^error /m);
    expect(code).toBe(0);
  });
});
