import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Seconds each test file took in a recent full run, keyed `project:path` (scripts/record-test-durations.mjs). */
const RECORDED: Record<string, number> = JSON.parse(readFileSync(new URL('./file-durations.json', import.meta.url), 'utf8'));

/**
 * Runs the longest files first, across every project, so the three workers finish together.
 *
 * Vitest's own order runs one project's files after another's and, on a clean clone (CI: no result
 * cache), in no order of length: a 90-second Kafka file could start when every other worker was
 * nearly done, and the run's last minutes were one worker's. Longest first over the whole run (the
 * classic greedy schedule) keeps the tail short. Durations come from this machine's own cache when
 * it has one (a developer's repeated runs) and from the recorded table otherwise; a file in neither
 * (a new one) runs first, as vitest does with files it does not know.
 */
export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const seconds = (spec: TestSpecification): number => {
      const key = `${spec.project.name}:${relative(this.ctx.config.root, spec.moduleId)}`;
      const cached = this.ctx.cache.getFileTestResults(key)?.duration;
      if (cached !== undefined) return cached / 1000;
      return RECORDED[key] ?? Number.POSITIVE_INFINITY;
    };
    return [...files].sort((a, b) => seconds(b) - seconds(a));
  }
}
