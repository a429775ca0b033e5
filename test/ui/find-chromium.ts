// Which Chromium the browser tests drive (see browser.ts): apart from browser.ts, so that
// scripts/test-tiers.ts can ask without loading vitest or printing the skip line.
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';

/** The Chromium to drive, or null when there is none. */
export function findChromium(env: NodeJS.ProcessEnv = process.env): string | null {
  // A newcomer's machine, played on one that has Chromium (test/ui/no-browser.test.ts).
  if (env.STATELOG_TEST_NO_CHROMIUM === '1') return null;
  const named = env.STATELOG_TEST_CHROMIUM;
  if (named) {
    // A name given and wrong is a mistake to report, not a reason to skip.
    if (!existsSync(named)) throw new Error(`STATELOG_TEST_CHROMIUM=${named}: no such file`);
    return named;
  }
  for (const candidate of ['/usr/bin/chromium', chromium.executablePath()]) {
    if (candidate && existsSync(candidate)) return candidate;
  }
  return null;
}
