import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const core = fileURLToPath(new URL('../..', import.meta.url));

// A child process in which `@opentelemetry/api` cannot be resolved (as in an app that never
// installed it; core resolves it with require, lazily): @inboxed/core loads, migrates and
// processes a message through the adapter layer (withInbox's database paths call the same
// otelApi(); the core suites run them).
const PROGRAM = `
import Module from 'node:module';
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === '@opentelemetry/api') throw Object.assign(new Error("Cannot find module '@opentelemetry/api'"), { code: 'MODULE_NOT_FOUND' });
  return resolve.call(this, request, ...rest);
};
const core = await import('./src/index.ts');
const { callProcessor, ConsumerEventEmitter } = await import('./src/adapter/index.ts');
const { otelApi } = await import('./src/telemetry/api.ts');
const { recordRetentionRun } = await import('./src/telemetry/instruments.ts');
// A processor as withInbox builds it, without a database: the telemetry paths are the adapter layer's.
const process = Object.assign(async (message) => ({ status: 'processed', messageId: message.id, consumer: 'c' }), {
  kind: 'single', consumer: 'c', checkTables: async () => {}, observe: () => {},
});
const events = new ConsumerEventEmitter();
events.instrument({ system: 'rabbitmq', destination: 'orders' });
const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const [outcome] = await callProcessor(process, [{ id: 'm1', payload: {}, headers: { traceparent } }], undefined, events);
events.emitOutcome(outcome, new Date());
recordRetentionRun({ deleted: 1 });
core.configureTelemetry({});
console.log(JSON.stringify({ api: otelApi(), status: outcome.status }));
`;

it('without @opentelemetry/api, core loads and processes a message (telemetry skipped)', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--conditions=@inboxed/source', '--import', 'tsx', '--input-type=module', '-e', PROGRAM], {
    cwd: core,
    timeout: 20_000,
  });
  expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual({ api: null, status: 'processed' });
});
