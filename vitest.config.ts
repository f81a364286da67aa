import { defineConfig } from 'vitest/config';

// One run, one summary: every package's own vitest project plus the cross-package tests in test/.
export default defineConfig({
  test: {
    projects: ['packages/*/vitest.config.ts', 'test/vitest.config.ts', 'test/package/vitest.config.ts'],
    reporters: ['default', './test/support/summary-reporter.ts'],
  },
});
