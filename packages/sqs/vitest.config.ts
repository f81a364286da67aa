import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@inboxed/source'] },
  ssr: { resolve: { conditions: ['@inboxed/source'] } },
  test: {
    name: 'sqs',
    include: ['src/**/*.test.ts'],
    globalSetup: ['../../test/support/postgres-setup.ts', '../../test/support/sqs-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 30_000,
    // The SDK warns once per process that releases after January 2027 need Node 22; the version is
    // pinned (see package.json), so the warning is noise in every test file's output.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
