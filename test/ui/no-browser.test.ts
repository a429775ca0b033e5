// A newcomer's machine has no Chromium: the browser test files must then skip with one
// line, not fail. Played here by running them with the browser hidden (outside CI).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('the browser tests without Chromium', () => {
  it('skip with one line and pass', { timeout: 120_000 }, () => {
    const env: NodeJS.ProcessEnv = { ...process.env, STATELOG_TEST_NO_CHROMIUM: '1', STATELOG_TEST_CHROMIUM: '' };
    delete env.CI;
    const run = spawnSync(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', '--config', 'test/ui/no-browser.config.ts'], { cwd: ROOT, env, encoding: 'utf8' });
    const output = run.stdout + run.stderr;
    expect(run.status, output).toBe(0);
    expect(output).toContain('dashboard browser tests skipped: no Chromium');
    expect(output).toMatch(/3 skipped/);
  });
});
