// The benchmark suite. Runs every figure (or those named with --only), writes the results
// as JSON and, for a whole run, regenerates docs/BENCHMARKS.md and docs/bench-chart.svg.
//   npm run bench                         the whole suite, under 10 minutes on 2 cores
//   npm run bench -- --only write,read    some figures (results in bench/results/<date>-write-read.json)
//   npm run bench -- --smoke              every figure briefly on tiny data: does the harness work?
//   npm run bench -- --list               what each figure measures and how long it takes
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { loadAverage, machine, versions } from './shared/facts.js';
import { met, type Figure, type FigureResult, type RunSettings } from './shared/figure.js';
import { buildServer } from '../harness/build.js';
import { ROOT, summary } from './shared/lib.js';
import { printList } from './shared/list.js';
import { writeDocs, type FigureRecord, type Results } from './shared/report.js';

/**
 * Every figure, in the order the suite runs them. A new bench script joins the suite with
 * one line here: its name for --only, and how to load the Figure it exports. Figures
 * marked { alone: true } run only when named with --only, to keep the suite under 10 minutes.
 */
const FIGURES: [string, () => Promise<Figure>, { alone?: boolean }?][] = [
  ['generator', async () => (await import('./writes/generator.js')).generatorFigure],
  ['write', async () => (await import('./writes/write.js')).writeFigure(50)],
  ['write-c1', async () => (await import('./writes/write.js')).writeFigure(1), { alone: true }],
  ['write-c10', async () => (await import('./writes/write.js')).writeFigure(10), { alone: true }],
  ['read', async () => (await import('./reads/read.js')).readFigure],
  ['batch', async () => (await import('./writes/batch.js')).batchFigure],
  ['incr', async () => (await import('./writes/incr.js')).incrFigure],
  ['guarded-incr', async () => (await import('./writes/guarded-incr.js')).guardedIncrFigure],
  ['peers', async () => (await import('./peers/peers.js')).peersFigure],
  ['snapshot', async () => (await import('./snapshots/snapshot.js')).snapshotFigure],
  ['wal-stalled-reader', async () => (await import('./snapshots/wal-stalled-reader.js')).walStalledReaderFigure],
  ['fanout', async () => (await import('./reads/fanout.js')).fanoutFigure],
  ['filtered-polls', async () => (await import('./reads/filtered-polls.js')).filteredPollsFigure],
  ['compact', async () => (await import('./snapshots/compact.js')).compactFigure],
  ['expiry', async () => (await import('./writes/expiry.js')).expiryFigure],
  ['expiry-pace', async () => (await import('./writes/expiry-pace.js')).expiryPaceFigure],
  ['expired-listing', async () => (await import('./reads/expired-listing.js')).expiredListingFigure],
  ['exact-bodies', async () => (await import('./writes/exact-bodies.js')).exactBodiesFigure],
  ['recovery', async () => (await import('./snapshots/recovery.js')).recoveryFigure],
  ['mirror', async () => (await import('./snapshots/mirror-restart.js')).mirrorFigure],
  ['postgres', async () => (await import('./postgres/postgres.js')).postgresFigure],
  ['postgres-scaling', async () => (await import('./postgres/scaling.js')).postgresScalingFigure, { alone: true }],
  ['tenants', async () => (await import('./writes/tenants.js')).tenantsFigure],
  ['followers', async () => (await import('./reads/followers.js')).followersFigure, { alone: true }],
  ['herd-large', async () => (await import('./reads/herd-large.js')).herdLargeFigure, { alone: true }],
];

const NAMES = FIGURES.map(([name]) => name);

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('a positive number');
  return n;
}

function names(value: string): string[] {
  const list = value.split(',').map((name) => name.trim()).filter(Boolean);
  const unknown = list.filter((name) => !NAMES.includes(name));
  if (unknown.length > 0) throw new InvalidArgumentError(`unknown figure ${unknown.join(', ')}; known: ${NAMES.join(', ')}`);
  return list;
}

const program = new Command('bench')
  .description('statelog benchmark suite')
  .option('--only <names>', 'comma-separated figures to run', names)
  .option('--smoke', 'every figure for a few seconds on tiny data (checks the harness; measures nothing)', false)
  .option('--full', 'the full-size runs of the figures that have one (compact, recovery)', false)
  .option('--rounds <n>', 'measured rounds per figure (default 3; 1 with --smoke)', positive)
  .option('--seconds <n>', 'seconds of load for one side of one round (default 4; 0.5 with --smoke)', positive)
  .option('--out <file>', 'where to write the results JSON')
  .option('--into <file>', 'replace these figures in an existing results file and regenerate the docs from it')
  .option('--no-docs', 'do not regenerate docs/BENCHMARKS.md and docs/bench-chart.svg')
  .option('--list', 'what each figure measures and how long its last run took, and the scripts run on their own', false)
  .parse();

const options = program.opts<{
  only?: string[];
  smoke: boolean;
  full: boolean;
  rounds?: number;
  seconds?: number;
  out?: string;
  into?: string;
  docs: boolean;
  list: boolean;
}>();

if (options.list) {
  await printList(FIGURES);
  process.exit(0);
}

// The servers measured are the compiled ones, as `npm start` runs them (not the sources
// through tsx): built now, so that they are the working tree's.
buildServer();

// A smoke run shares the machine with the test suite: a server's event loop there can lag a
// second behind at start-up, and its load shedding would refuse the few requests a figure sends.
if (options.smoke) process.env.STATELOG_MAX_EVENT_LOOP_DELAY_MS ??= '0';

const selected = FIGURES.filter(([name, , flags]) => (options.only ? options.only.includes(name) : !flags?.alone));
const command = ['npm run bench', ...(process.argv.length > 2 ? ['--', ...process.argv.slice(2)] : [])].join(' ');
const base: Omit<RunSettings, 'log'> = {
  smoke: options.smoke,
  full: options.full,
  rounds: options.rounds ?? (options.smoke ? 1 : 3),
  seconds: options.seconds ?? (options.smoke ? 0.5 : 4),
  warmupSeconds: options.smoke ? 0.2 : 1,
};

const date = new Date().toISOString().slice(0, 10);
const suffix = [options.only ? options.only.join('-') : '', options.full ? 'full' : '', options.smoke ? 'smoke' : ''].filter(Boolean);
const outFile =
  options.into ??
  options.out ??
  (options.smoke ? join(tmpdir(), `statelog-bench-smoke-${process.pid}.json`) : join(ROOT, 'bench', 'results', `${[date, ...suffix].join('-')}.json`));
// Docs come from a whole measured run, or from a results file a figure is merged into.
const regenerateDocs = options.docs && !options.smoke && (!options.only || options.into !== undefined);

function record(figure: Figure, result: FigureResult | null, error: unknown, started: Date, loadBefore: number): FigureRecord {
  const common = {
    name: figure.name,
    title: figure.title,
    command: `npm run bench -- --only ${figure.name}${options.full ? ' --full' : ''}${options.smoke ? ' --smoke' : ''}`,
    startedAt: started.toISOString(),
    durationS: Number(((Date.now() - started.getTime()) / 1000).toFixed(1)),
    load: { before: loadBefore, after: loadAverage()[0] },
  };
  if (!result) return { ...common, error: error instanceof Error ? error.message : String(error) };
  return {
    ...common,
    ...result,
    metrics: result.metrics.map((m) => {
      const { median, min, max } = summary(m.values);
      return { ...m, median, min, max, met: met(m, median) };
    }),
  };
}

const startedAt = new Date();
const loadStart = loadAverage();
console.log(`statelog benchmarks: ${selected.map(([name]) => name).join(', ')}; load average ${loadStart.join(', ')}`);
const results: Results = {
  startedAt: startedAt.toISOString(),
  durationS: 0,
  command,
  settings: { rounds: base.rounds, seconds: base.seconds, warmupSeconds: base.warmupSeconds, smoke: base.smoke, full: base.full },
  machine: machine(),
  versions: versions(),
  load: { start: loadStart, end: [] },
  figures: [],
};

for (const [name, load] of selected) {
  const figure = await load();
  const started = new Date();
  const loadBefore = loadAverage()[0];
  console.log(`\n== ${name}: ${figure.title}`);
  let result: FigureResult | null = null;
  let error: unknown = null;
  try {
    result = await figure.run({ ...base, log: (line) => console.log(`  [${name}] ${line}`) });
  } catch (err) {
    error = err;
    console.error(`  [${name}] FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  }
  const entry = record(figure, result, error, started, loadBefore);
  for (const m of entry.metrics ?? []) {
    const verdict = m.met === null ? '' : m.met ? '  (target met)' : '  (target MISSED)';
    console.log(`  ${m.label}: ${m.median.toFixed(2)} ${m.unit} [${m.min.toFixed(2)} – ${m.max.toFixed(2)}]${verdict}`);
  }
  console.log(`  ${entry.durationS} s`);
  results.figures.push(entry);
  Object.assign(results.versions, result?.versions ?? {});
}

results.durationS = Number(((Date.now() - startedAt.getTime()) / 1000).toFixed(1));
results.load.end = loadAverage();

let saved: Results = results;
if (options.into) {
  // Merge: the file keeps its other figures (and its machine facts); these replace theirs.
  const previous = JSON.parse(readFileSync(options.into, 'utf8')) as Results;
  const replaced = new Set(results.figures.map((f) => f.name));
  saved = {
    ...previous,
    versions: { ...previous.versions, ...results.versions },
    figures: [...previous.figures.filter((f) => !replaced.has(f.name)), ...results.figures].sort(
      (a, b) => NAMES.indexOf(a.name) - NAMES.indexOf(b.name),
    ),
  };
}
mkdirSync(join(outFile, '..'), { recursive: true });
writeFileSync(outFile, `${JSON.stringify(saved, null, 2)}\n`);
console.log(`\nresults: ${relative(process.cwd(), outFile) || outFile} (${results.durationS} s in all; load average ${results.load.end.join(', ')} at the end)`);
if (regenerateDocs) console.log(`docs: ${writeDocs(saved).join(', ')}`);
if (!options.smoke && !options.only && results.durationS > 600) console.warn(`the suite took ${results.durationS} s, more than its 10 minutes`);

const failed = results.figures.filter((f) => f.error);
if (failed.length > 0) {
  console.error(`failed: ${failed.map((f) => f.name).join(', ')}`);
  process.exitCode = 1;
}
