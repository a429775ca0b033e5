// Prints "N passed, N failed" summed over vitest's JSON reports (a missing report is a
// failure). With `--times <file>` (lines "step<TAB>started<TAB>seconds<TAB>ok|FAILED<TAB>cpu%"
// from .ci/run: `started` in seconds from its start, cpu% how busy the machine's cores were
// meanwhile), first a table of each step's start, time, CPU and tests, and a failed step
// whose report shows no failed test (a typecheck, a tier that could not start) counts as
// one failure. Steps may overlap: the total is the wall time from the first start to the last end.
import { existsSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';

const args = process.argv.slice(2);
const timesAt = args.indexOf('--times');
const timesFile = timesAt >= 0 ? args.splice(timesAt, 2)[1] : null;
const files = args;

/** A report's tests, or null when it is missing. */
function read(file) {
  if (!existsSync(file)) return null;
  const report = JSON.parse(readFileSync(file, 'utf8'));
  const suiteOnly = report.numFailedTestSuites > 0 && report.numFailedTests === 0 ? 1 : 0;
  return { passed: report.numPassedTests, failed: report.numFailedTests + suiteOnly, failures: failuresOf(report) };
}

/** What failed, one line each (file and test, or the file that could not run): the end of CI's output names it. */
function failuresOf(report) {
  const lines = [];
  for (const suite of report.testResults ?? []) {
    const failedTests = (suite.assertionResults ?? []).filter((test) => test.status === 'failed');
    for (const test of failedTests) lines.push(`${suite.name}: ${test.fullName}: ${String(test.failureMessages?.[0] ?? '').split('\n')[0]}`);
    if (failedTests.length === 0 && suite.status === 'failed') lines.push(`${suite.name}: ${String(suite.message ?? 'failed to run').split('\n')[0]}`);
  }
  return lines;
}

let passed = 0;
let failed = files.length === 0 ? 1 : 0;
const byReport = new Map();
for (const file of files) {
  const tests = read(file);
  if (!tests) {
    failed += 1;
    continue;
  }
  byReport.set(basename(file, '.json'), tests);
  passed += tests.passed;
  failed += tests.failed;
}

if (timesFile && existsSync(timesFile)) {
  const minutes = (s) => `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
  const steps = readFileSync(timesFile, 'utf8').trim().split('\n').map((line) => line.split('\t'));
  steps.sort((a, b) => Number(a[1]) - Number(b[1]));
  const rows = [['step', 'start', 'time', 'cpu', 'result', 'tests passed', 'failed']];
  const first = Number(steps[0]?.[1] ?? 0);
  let last = 0;
  for (const [name, started, seconds, result, cpu] of steps) {
    last = Math.max(last, Number(started) + Number(seconds));
    // test:<tier> reports as tier-<tier>.json; other steps under their own name.
    const tests = byReport.get(name.startsWith('test:') ? `tier-${name.slice(5)}` : name);
    if (result !== 'ok' && !(tests && tests.failed > 0)) failed += 1;
    rows.push([name, minutes(Number(started) - first), minutes(Number(seconds)), `${cpu}%`, result, tests ? String(tests.passed) : '', tests ? String(tests.failed) : '']);
  }
  rows.push(['total', '', minutes(last - first), '', '', '', '']);
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  for (const row of rows) console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join('  ').trimEnd());
  console.log();
}
const failures = [...byReport].flatMap(([name, tests]) => tests.failures.map((line) => `${name}: ${line}`));
if (failures.length > 0) console.log(`failed:\n${failures.map((line) => `  ${line.slice(0, 300)}`).join('\n')}\n`);
console.log(`${passed} passed, ${failed} failed`);
