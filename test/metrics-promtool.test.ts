// /metrics of a live app after some traffic, checked by Prometheus's own linter,
// `promtool check metrics` (Debian's `prometheus` package). Without promtool the test is
// skipped with one line, except under CI=true (.ci/run installs it), where it fails.
import { spawn, spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';

const PROMTOOL = process.env.STATELOG_TEST_PROMTOOL || 'promtool';
const found = spawnSync(PROMTOOL, ['--version'], { stdio: 'ignore' }).status === 0;
const skip = !found && process.env.CI !== 'true';
if (skip) console.warn('promtool check of /metrics skipped: no promtool (apt-get install prometheus, or set STATELOG_TEST_PROMTOOL)');

function promtool(text: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(PROMTOOL, ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.once('error', reject);
    proc.once('exit', (code) => resolve({ code, output }));
    proc.stdin.end(text);
  });
}

describe.skipIf(skip)('/metrics', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startApp();
  });
  afterAll(() => t?.close());

  it('passes promtool check metrics, with every family of the service present', async () => {
    expect(found, `no ${PROMTOOL}: apt-get install prometheus`).toBe(true);
    await t.http.put('/v1/keys/a').set(json).send({ value: 1 });
    await t.http.put('/v1/keys/a').set(json).send({ value: 2 });
    await t.http.get('/v1/changes?after=2&wait=0.1');
    await t.http.get('/v1/keys/missing');
    expect((await t.http.post('/v1/admin/compact')).status).toBe(200);
    const res = await t.http.get('/metrics');
    expect(res.status).toBe(200);
    for (const name of ['statelog_build_info', 'statelog_stream_duration_seconds', 'statelog_last_compaction_success_timestamp_seconds']) {
      expect(res.text).toContain(`# TYPE ${name} `);
    }
    expect(await promtool(res.text)).toEqual({ code: 0, output: '' });
  });
});
