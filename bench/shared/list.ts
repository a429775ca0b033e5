// What `npm run bench -- --list` prints: every figure of the suite with what it measures
// and how long its last recorded run took (from bench/results), then the scripts that run
// on their own, each with the first sentence of its header and its folder.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { Figure } from './figure.js';
import { ROOT } from './lib.js';

/**
 * The scripts outside the suite, by what they measure: each is run on its own with the
 * command its header gives (how long depends on the arguments it is given).
 */
const TOOLS = [
  'bench/writes/fsync.ts',
  'bench/reads/history-index.ts',
  'bench/snapshots/quick-check.ts',
  'bench/snapshots/snapshot-cpu.ts',
  'bench/profiling/app-build.ts',
  'bench/profiling/profile.ts',
  'bench/profiling/versus-commit.ts',
  'bench/profiling/cpu-per-request.ts',
  'bench/profiling/batch-cpu.ts',
  'bench/profiling/callgrind.ts',
  'bench/profiling/store-commit-cpu.mjs',
  'bench/profiling/sqlite-commit-cpu.mjs',
  'bench/profiling/stall-trace.mjs',
];

interface LastRun {
  seconds: number;
  file: string;
}

/** Each figure's duration in the newest results file that measured it (plain and --full apart). */
function lastRuns(): Map<string, LastRun> {
  const dir = join(ROOT, 'bench', 'results');
  const runs = new Map<string, LastRun>();
  for (const file of readdirSync(dir).filter((name) => name.endsWith('.json')).sort()) {
    let results: { settings?: { full?: boolean; smoke?: boolean }; figures?: { name: string; durationS?: number; error?: string }[] };
    try {
      results = JSON.parse(readFileSync(join(dir, file), 'utf8'));
    } catch {
      continue;
    }
    if (!Array.isArray(results.figures) || results.settings?.smoke) continue;
    for (const figure of results.figures) {
      if (figure.error || typeof figure.durationS !== 'number') continue;
      runs.set(`${figure.name}${results.settings?.full ? ' --full' : ''}`, { seconds: figure.durationS, file });
    }
  }
  return runs;
}

/** The header's first sentence (up to its first full stop, colon or question mark). */
function headline(path: string): string {
  const lines: string[] = [];
  for (const line of readFileSync(join(ROOT, path), 'utf8').split('\n')) {
    if (!line.startsWith('//')) break;
    lines.push(line.replace(/^\/\/\s?/, ''));
  }
  const text = lines.join(' ');
  const end = /[.:?](\s|$)/.exec(text);
  return end ? text.slice(0, end.index + (end[0].startsWith('?') ? 1 : 0)) : text;
}

const minutes = (seconds: number) => (seconds >= 90 ? `${(seconds / 60).toFixed(1)} min` : `${Math.round(seconds)} s`);

export async function printList(figures: [string, () => Promise<Figure>, { alone?: boolean }?][]): Promise<void> {
  const runs = lastRuns();
  console.log('Figures (npm run bench -- --only <name>); "alone": not in a whole run, only when named.\n');
  for (const [name, load, flags] of figures) {
    const figure = await load();
    const plain = runs.get(name);
    const full = runs.get(`${name} --full`);
    const took = [
      plain ? `${minutes(plain.seconds)} (${plain.file})` : 'not recorded in bench/results',
      ...(full ? [`--full ${minutes(full.seconds)} (${full.file})`] : []),
    ].join('; ');
    console.log(`${name}${flags?.alone ? ' (alone)' : ''}\n  ${figure.title}\n  last run: ${took}`);
  }
  console.log('\nScripts run on their own (the command and arguments are in each file\'s header):\n');
  for (const path of TOOLS) console.log(`${relative(ROOT, join(ROOT, path))}\n  ${headline(path)}`);
}
