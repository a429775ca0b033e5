// The failover matrix of docs/postgres.md: test/ha/failover.test.ts run `runs` times (a new
// cluster each time), each scenario's figures gathered from its report lines, one row per
// scenario: runs, median write pause, writes acknowledged, acknowledged writes lost or
// applied twice, followers told to reset, nodes serving a record the database lacks.
//   flock /tmp/statelog-heavy.lock npx tsx test/ha/failover-matrix.ts [runs]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const runs = Number(process.argv[2] ?? 3);
const dir = mkdtempSync(join(tmpdir(), 'statelog-ha-matrix-'));
const file = join(dir, 'report.jsonl');
let failedRuns = 0;
for (let run = 1; run <= runs; run++) {
  const result = spawnSync('npx', ['vitest', 'run', 'test/ha/failover.test.ts', '--project', 'ha'], {
    env: { ...process.env, CI: 'true', STATELOG_HA_REPORT: file },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (result.status !== 0) failedRuns += 1;
  console.error(`run ${run} of ${runs}: ${result.status === 0 ? 'passed' : 'FAILED'}`);
}

interface Line {
  scenario: string;
  pauseMs?: number;
  acked: number;
  lost: number;
  appliedTwice: number;
  resets: number;
  diverged: number;
}
const lines = readFileSync(file, 'utf8').trim().split('\n').map((line) => JSON.parse(line) as Line);
rmSync(dir, { recursive: true, force: true });
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);

console.log('| scenario | runs | median write pause | acknowledged | lost | applied twice | resets | nodes diverged |');
console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
for (const scenario of [...new Set(lines.map((line) => line.scenario))]) {
  const of = lines.filter((line) => line.scenario === scenario);
  const pauses = of.flatMap((line) => (line.pauseMs === undefined ? [] : [line.pauseMs]));
  const pause = pauses.length > 0 ? `${(median(pauses)! / 1000).toFixed(1)} s` : '–';
  console.log(
    `| ${scenario} | ${of.length} | ${pause} | ${sum(of.map((l) => l.acked))} | ${sum(of.map((l) => l.lost))} | ${sum(of.map((l) => l.appliedTwice))} | ${sum(of.map((l) => l.resets))} | ${sum(of.map((l) => l.diverged))} |`,
  );
}
console.log(`\n${runs - failedRuns} of ${runs} runs passed every check.`);
