import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@inboxed/source'] },
  ssr: { resolve: { conditions: ['@inboxed/source'] } },
  test: {
    name: 'system',
    include: ['fault/**/*.test.ts', 'soak/core-soak.test.ts', 'docs/**/*.test.ts'],
    // RabbitMQ for fault/leased-kill.test.ts (worker processes on the amqp adapter).
    globalSetup: ['./support/postgres-setup.ts', './support/amqp-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});
