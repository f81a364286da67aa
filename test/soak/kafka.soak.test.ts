import { it } from 'vitest';
import { createHarness } from '../../packages/kafka/test/harness.js';
import { SOAK_MESSAGES, soak, summaryLine } from './broker-soak.js';

it(`kafka soak: ${SOAK_MESSAGES} deliveries, 3 workers killed at random, one effect per unique id`, async () => {
  const summary = await soak(createHarness);
  process.stdout.write(`${summaryLine(summary)}\n`);
});
