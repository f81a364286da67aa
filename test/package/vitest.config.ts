import { defineProject } from 'vitest/config';

// The packages as a user gets them: packed once (pack-setup.ts), linted as published (publint,
// arethetypeswrong) and installed with npm into an app outside the workspace that runs the real
// drizzle-kit CLI. No `@inboxed/source` condition here: nothing in this project imports the
// packages from the monorepo.
export default defineProject({
  test: {
    name: 'package',
    include: ['**/*.test.ts'],
    globalSetup: ['../support/postgres-setup.ts', '../support/amqp-setup.ts', '../support/sqs-setup.ts', '../support/kafka-setup.ts', './pack-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
