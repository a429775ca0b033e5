// Runs test tiers (test/tiers.ts): each whose needs are there, in one vitest run; each
// whose needs are absent is skipped with one line, and fails instead under CI=true (unless
// the tier says .ci/run does not provide it yet). Arguments after the tier names go to vitest.
//
//   tsx scripts/test-tiers.ts pg                  (npm run test:pg)
//   tsx scripts/test-tiers.ts all                 (npm run test:all: every tier, the fast one included)
//   tsx scripts/test-tiers.ts crash,nginx -- --reporter=dot
//   tsx scripts/test-tiers.ts --list              the tiers, what each proves and needs, and its files' globs
//   tsx scripts/test-tiers.ts --names             the tier names, one a line (for .ci/run)
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TIERS, type Tier } from '../test/tiers.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The one line a tier is skipped with, or null when it can run. */
export async function missing(tier: Tier): Promise<string | null> {
  for (const need of tier.needs) {
    if (!(await need.present())) return `test:${tier.name} skipped: needs ${need.name} (${need.hint})`;
  }
  return null;
}

function usage(message: string): never {
  console.error(`${message}\nusage: tsx scripts/test-tiers.ts <tier>[,<tier>...] | all [-- vitest options]; tiers: ${TIERS.map((t) => t.name).join(', ')}`);
  process.exit(2);
}

const [first, ...rest] = process.argv.slice(2);
if (first === '--names') {
  console.log(TIERS.map((tier) => tier.name).join('\n'));
  process.exit(0);
}
if (first === '--list') {
  for (const tier of TIERS) {
    const needs = tier.needs.map((need) => need.name).join(', ');
    console.log(`${tier.name}: ${tier.what}${needs ? `; needs ${needs}` : ''}\n  ${tier.include.join(' ')}${tier.name === 'fast' ? ' (less every other tier\'s)' : ''}`);
  }
  process.exit(0);
}
if (!first || first.startsWith('-')) usage('no tier named');

const names = first === 'all' ? TIERS.map((tier) => tier.name) : first.split(',');
const selected = names.map((name) => TIERS.find((tier) => tier.name === name) ?? usage(`no tier "${name}"`));
const vitestArgs = rest[0] === '--' ? rest.slice(1) : rest;

const ci = process.env.CI === 'true';
const runnable: Tier[] = [];
let failed = false;
for (const tier of selected) {
  const why = await missing(tier);
  if (why === null) runnable.push(tier);
  else if (ci && !tier.optionalInCi) {
    console.error(`${why.replace(' skipped:', ' cannot run under CI=true:')}`);
    failed = true;
  } else console.log(why);
}

if (runnable.length > 0) {
  const vitest = join(ROOT, 'node_modules/vitest/vitest.mjs');
  const projects = runnable.flatMap((tier) => ['--project', tier.name]);
  const run = spawnSync(process.execPath, [vitest, 'run', ...projects, ...vitestArgs], { cwd: ROOT, stdio: 'inherit' });
  if (run.status !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
