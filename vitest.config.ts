import { defaultServerConditions } from 'vite';
import { relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { TIERS, tierFiles, WAITING } from './test/tiers.js';

/** vitest's order (the slowest first, by its cache of durations, else the largest), with the WAITING files before all. */
class WaitingFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const waiting = (file: TestSpecification) => WAITING.includes(relative(import.meta.dirname, file.moduleId));
    return [...sorted.filter(waiting), ...sorted.filter((file) => !waiting(file))];
  }
}

// One project a tier (test/tiers.ts declares them, with their files and what they need):
// `npm test` runs the fast one, `npm run test:<tier>` another, `npm run test:all` them all.
// A file runs on the store its tier names (test/support/store-access.ts reads
// STATELOG_TEST_STORE); the pg tier runs the files of the tiers that use a store again on
// PostgreSQL.
export default defineConfig({
  // The workspace packages (packages/*) are tested from their TypeScript, not their build.
  ssr: { resolve: { conditions: ['@statelog/source', ...defaultServerConditions] } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    sequence: { sequencer: WaitingFirst },
    // Each worker keeps its modules from one file to the next: re-importing fastify, ajv,
    // pg and the rest for every file cost about a fifth of the suite. The files share no
    // state through them: every app, store and registry is made by the test that uses it.
    isolate: false,
    // Both cores: most files spend their time waiting on child servers and PostgreSQL.
    maxWorkers: 2,
    // A tier may have no files yet (ha): that is not a failure.
    passWithNoTests: true,
    projects: TIERS.map((tier) => ({
      extends: true,
      test: {
        name: tier.name,
        ...tierFiles(tier),
        env: { STATELOG_TEST_STORE: tier.store, ...tier.env },
        globalSetup: tier.globalSetup,
        fileParallelism: !tier.serial,
      },
    })),
  },
});
