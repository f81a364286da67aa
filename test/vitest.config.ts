import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@inboxed/source'] },
  ssr: { resolve: { conditions: ['@inboxed/source'] } },
  test: {
    name: 'system',
    include: ['fault/**/*.test.ts', 'soak/core-soak.test.ts', 'docs/**/*.test.ts'],
    globalSetup: ['./support/postgres-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});
