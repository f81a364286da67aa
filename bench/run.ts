/**
 * `pnpm bench`: runs every suite in ./suites in a fixed order. Each suite measures inboxed next to
 * the same work without it in the same run, so ratios are not skewed by a noisy machine's drift.
 * Pick suites with `pnpm bench core amqp`.
 */
import { existsSync } from 'node:fs';

const ORDER = ['core', 'amqp', 'kafka', 'sqs'];
const wanted = process.argv.slice(2);
const suites = wanted.length > 0 ? wanted : ORDER;

for (const name of suites) {
  const file = new URL(`./suites/${name}.ts`, import.meta.url);
  if (!existsSync(file)) {
    console.log(`\n(${name}: no benchmark suite yet)`);
    continue;
  }
  const suite = (await import(file.href)) as { default: () => Promise<void> };
  await suite.default();
}
process.exit(0);
