// The browser test files alone, without the suite's global set-up (nothing is built:
// without a browser they run nothing), for test/ui/no-browser.test.ts.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: { include: ['test/ui/cors.test.ts', 'test/ui/dashboard.test.ts', 'test/ui/event-source.test.ts'], pool: 'forks' },
});
