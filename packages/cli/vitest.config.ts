import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@inboxed/source'] },
  ssr: { resolve: { conditions: ['@inboxed/source'] } },
  test: {
    name: 'cli',
    include: ['src/**/*.test.ts'],
    globalSetup: ['../../test/support/postgres-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 30_000,
  },
});
