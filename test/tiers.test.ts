// The tiers of test/tiers.ts as vitest and npm see them: every test file runs in exactly
// one tier on SQLite (the fast one unless a slower tier claims it), the pg tier runs the
// store's files again on PostgreSQL, every tier has its npm script, and a tier whose needs
// are absent is skipped with one line, or fails under CI=true.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SLOW_TIERS, TIERS, WAITING } from './tiers.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const VITEST = join(ROOT, 'node_modules/vitest/vitest.mjs');
const TSX = join(ROOT, 'node_modules/tsx/dist/cli.mjs');

function testFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'support' ? [] : testFiles(path);
    return entry.name.endsWith('.test.ts') ? [path] : [];
  });
}

/** Runs the tier runner with the environment given (CI unset unless named). */
function runTiers(args: string[], env: Record<string, string>) {
  const base: NodeJS.ProcessEnv = { ...process.env, ...env };
  if (!('CI' in env)) delete base.CI;
  return spawnSync(process.execPath, [TSX, 'scripts/test-tiers.ts', ...args], { cwd: ROOT, env: base, encoding: 'utf8' });
}

describe('the test tiers', () => {
  it('put every test file in exactly one SQLite tier, and the pg tier on PostgreSQL only', { timeout: 60_000 }, () => {
    const list = spawnSync(process.execPath, [VITEST, 'list', '--filesOnly', '--json'], { cwd: ROOT, encoding: 'utf8' });
    expect(list.status, list.stderr).toBe(0);
    const listed = (JSON.parse(list.stdout) as { file: string; projectName: string }[]).map((f) => ({ file: relative(ROOT, f.file), tier: f.projectName }));
    const sqliteTiers = new Set(TIERS.filter((tier) => tier.store === 'sqlite').map((tier) => tier.name));
    const onSqlite = new Map<string, string[]>();
    for (const { file, tier } of listed.filter((f) => sqliteTiers.has(f.tier))) onSqlite.set(file, [...(onSqlite.get(file) ?? []), tier]);
    const everyFile = testFiles('test').filter((file) => !file.startsWith('test/postgres/') && !file.startsWith('test/ha/'));
    for (const file of everyFile) expect({ file, tiers: onSqlite.get(file) }).toEqual({ file, tiers: [expect.any(String)] });
    const pg = listed.filter((f) => f.tier === 'pg').map((f) => f.file);
    expect(pg).toContain('test/postgres/pg-store.test.ts');
    expect(pg).toContain('test/crash.test.ts');
    expect(pg).not.toContain('test/cli.test.ts');
    expect(pg).not.toContain('test/nginx-cache.test.ts');
    // A new file lands in the fast tier.
    expect(onSqlite.get('test/keys.test.ts')).toEqual(['fast']);
    // The files started first are test files still (a renamed one would just lose its place).
    for (const file of WAITING) expect(onSqlite.has(file), file).toBe(true);
  });

  it('each have their npm script', () => {
    const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.test).toBe('vitest run --project fast');
    expect(scripts['test:all']).toBe('tsx scripts/test-tiers.ts all');
    for (const tier of SLOW_TIERS) expect(scripts[`test:${tier.name}`]).toBe(`tsx scripts/test-tiers.ts ${tier.name}`);
  });

  it('skip with one line when what they need is absent, and fail under CI=true', { timeout: 60_000 }, () => {
    const away = { STATELOG_TEST_PROMTOOL: '/nonexistent/promtool' };
    const skipped = runTiers(['promtool'], away);
    expect(skipped.status, skipped.stderr).toBe(0);
    expect(skipped.stdout.trim().split('\n')).toEqual([expect.stringMatching(/^test:promtool skipped: needs promtool \(.*prometheus.*\)$/)]);
    const inCi = runTiers(['promtool'], { ...away, CI: 'true' });
    expect(inCi.status).toBe(1);
    expect(inCi.stderr).toMatch(/^test:promtool cannot run under CI=true: needs promtool/m);
  });

  it('name an unknown tier as a usage error', () => {
    const run = runTiers(['nosuch'], {});
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/no tier "nosuch"/);
  });

  it('pass when a tier has no files yet', { timeout: 120_000 }, () => {
    // A filter no file matches: the tier as it is before its first file lands.
    const run = spawnSync(process.execPath, [VITEST, 'run', '--project', 'ha', 'test/ha/no-such-file'], { cwd: ROOT, encoding: 'utf8' });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout + run.stderr).toMatch(/No test files found/);
  });
});
