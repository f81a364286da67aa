import { defineProject } from 'vitest/config';

// The broker soaks (issue 11): every adapter, three worker processes, SIGKILLs. `pnpm test` runs
// them at the CI size; `pnpm test:soak` at 20,000 deliveries each (SOAK_MESSAGES). leased-soak.test.ts
// runs the amqp soak once more in leased mode, charging a fake payment provider.
export default defineProject({
  resolve: { conditions: ['@inboxed/source'] },
  ssr: { resolve: { conditions: ['@inboxed/source'] } },
  test: {
    name: 'soak',
    include: ['*.soak.test.ts', 'leased-soak.test.ts'],
    globalSetup: ['../support/postgres-setup.ts', '../support/amqp-setup.ts', '../support/kafka-setup.ts', '../support/sqs-setup.ts'],
    testTimeout: 900_000,
    hookTimeout: 60_000,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
