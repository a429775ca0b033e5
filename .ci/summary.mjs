// Prints "N passed, N failed" summed over vitest's JSON reports (a missing report is a failure).
import { existsSync, readFileSync } from 'node:fs';

const files = process.argv.slice(2);
let passed = 0;
let failed = files.length === 0 ? 1 : 0;
for (const file of files) {
  if (!existsSync(file)) {
    failed += 1;
    continue;
  }
  const report = JSON.parse(readFileSync(file, 'utf8'));
  passed += report.numPassedTests;
  failed += report.numFailedTests + (report.numFailedTestSuites > 0 && report.numFailedTests === 0 ? 1 : 0);
}
console.log(`${passed} passed, ${failed} failed`);
