// An earlier commit's server, compiled beside this checkout, for figures that set today's
// code side by side with what came before it in one run.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './lib.js';

/**
 * Compiles `commit` from a temporary worktree into `.base-<sha>/` at the top of this
 * checkout: as deep as dist/, so that its imports find this checkout's node_modules and
 * its `../../migrations` paths the migrations. Returns that folder.
 */
export function buildCommit(commit: string): string {
  const sha = execFileSync('git', ['rev-parse', '--short', commit], { cwd: ROOT, encoding: 'utf8' }).trim();
  const tree = mkdtempSync(join(tmpdir(), 'statelog-base-'));
  const out = join(ROOT, `.base-${sha}`);
  try {
    execFileSync('git', ['worktree', 'add', '--detach', tree, sha], { cwd: ROOT, stdio: 'ignore' });
    symlinkSync(join(ROOT, 'node_modules'), join(tree, 'node_modules'));
    mkdirSync(out, { recursive: true });
    execFileSync(join(ROOT, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json', '--outDir', out], { cwd: tree, stdio: 'inherit' });
  } finally {
    execFileSync('git', ['worktree', 'remove', '--force', tree], { cwd: ROOT, stdio: 'ignore' });
  }
  return out;
}
