// The benchmark harness works: the smoke mode of a fast subset of the suite runs end to
// end through bench/run.ts (real servers, the load generator, the incr check, the
// results file), and the report renders from what it wrote. The real numbers are never
// measured in CI.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { createServer, connect, type AddressInfo } from 'node:net';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { startBare, startStatelog, type Server } from '../bench/shared/lib.js';
import { autocannonCli, load, prebuilt } from '../bench/shared/load.js';
import { renderChart, renderMarkdown, type Results } from '../bench/shared/report.js';
import { putRequest } from '../bench/writes/write.js';
import { DelayedLink } from '../bench/postgres/standby-link.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const execFileAsync = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-smoke-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function runSuite(args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--conditions=@statelog/source', '--import', 'tsx', 'bench/run.ts', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => resolve({ code, output }));
  });
}

/** Runs these figures in smoke mode; checks each ran without error and gave finite medians. */
async function smoke(figures: string[]) {
  const out = join(dir, `smoke-${figures.join('-')}.json`);
  const { code, output } = await runSuite(['--smoke', '--only', figures.join(','), '--out', out]);
  expect(code, output).toBe(0);
  const results = JSON.parse(readFileSync(out, 'utf8')) as Results;
  expect(results.figures.map((f) => f.name)).toEqual(figures);
  for (const figure of results.figures) {
    expect(figure.error, figure.name).toBeUndefined();
    for (const metric of figure.metrics!) expect(Number.isFinite(metric.median), `${figure.name}: ${metric.label}`).toBe(true);
  }
  const metric = (figure: string, label: string) =>
    results.figures.find((f) => f.name === figure)!.metrics!.find((m) => m.label.startsWith(label))!;
  return { results, metric };
}

describe('the load generator (bench/shared/load.ts)', () => {
  let bare: Server;
  afterAll(() => bare?.stop());

  it('counts answered PUTs with their latency over two processes, and the autocannon reference too', { timeout: 60_000 }, async () => {
    bare = await startBare();
    const result = await load({ url: bare.url, connections: 4, seconds: 0.3, requests: prebuilt(putRequest, 20), threads: 2 });
    expect(result.errors).toBe(0);
    expect(result.requests).toBeGreaterThan(0);
    expect(result.rps).toBeGreaterThan(0);
    expect(result.p50).toBeGreaterThan(0);
    expect(result.p99).toBeGreaterThanOrEqual(result.p50);

    const reference = await autocannonCli(bare.url, 4, 0.3, putRequest());
    expect(reference.errors).toBe(0);
    expect(reference.requests).toBeGreaterThan(0);
    expect(reference.command).toMatch(/^autocannon -c 4 -d 0.3 -m PUT/);
  });

  it('counts answers other than 2xx as errors, not as requests', { timeout: 60_000 }, async () => {
    bare ??= await startBare();
    const result = await load({ url: bare.url, connections: 2, seconds: 0.2, requests: [{ method: 'GET', path: '/nowhere' }], threads: 1 }); // 404
    expect(result.requests).toBe(0);
    expect(result.errors).toBeGreaterThan(0);
  });
});

describe('npm run bench -- --smoke', () => {
  // The two smoke runs side by side (they share nothing but the folder): one alone leaves a core idle.
  it.concurrent('runs write, read and incr briefly and writes a results file the report renders', { timeout: 180_000 }, async () => {
    const { results, metric } = await smoke(['write', 'read', 'incr']);
    expect(results.versions.node).toBe(process.version);
    expect(results.machine.cores).toBeGreaterThan(0);
    for (const figure of results.figures) expect(figure.settings?.failedRequests, figure.name).toBe(0);
    expect(metric('write', 'statelog PUT').median).toBeGreaterThan(0);
    expect(metric('read', 'ratio statelog / bare').median).toBeGreaterThan(0);
    // The cores each side used, read from /proc and from the generator's processes.
    expect(metric('write', 'statelog server CPU').median).toBeGreaterThan(0);
    expect(metric('write', 'load generator CPU, bare rounds').median).toBeGreaterThan(0);
    expect(metric('write', 'machine busy, statelog rounds').median).toBeGreaterThan(0);
    expect(metric('write', 'machine busy, statelog rounds').median).toBeLessThanOrEqual(100);
    expect(metric('incr', 'acknowledged increments').median).toBeGreaterThan(0);
    // The harness's own check: no acknowledged increment lost.
    expect(metric('incr', 'lost updates').median).toBe(0);
    expect(metric('incr', 'duplicate results').median).toBe(0);

    const page = renderMarkdown(results, null);
    for (const figure of results.figures) expect(page).toContain(`### ${figure.title}`);
    expect(page).toContain('| write: ratio statelog / bare (req/s) |');
  });

  it.concurrent('runs the generator, snapshot, fan-out and mirror figures briefly, each subscriber receiving every record', { timeout: 180_000 }, async () => {
    // The figures themselves throw unless the snapshot was whole and every subscriber got every record.
    const { metric } = await smoke(['generator', 'snapshot', 'fanout', 'mirror']);
    expect(metric('generator', 'ratio generator / autocannon CLI').median).toBeGreaterThan(0);
    expect(metric('mirror', 'ready from the checkpoint').median).toBeGreaterThan(0);
    expect(metric('snapshot', 'snapshot read').median).toBeGreaterThan(0);
    expect(metric('fanout', 'statelog delivery p99').median).toBeGreaterThan(0);
    expect(metric('fanout', 'bare relay delivery p99').median).toBeGreaterThan(0);
    // The warm-up's records are reported apart, not dropped.
    expect(metric('fanout', 'statelog delivery p99 in the warm-up').median).toBeGreaterThan(0);
    expect(metric('fanout', 'bare relay delivery p99 in the warm-up').median).toBeGreaterThan(0);
  });

  it('--list says what each figure measures and how long its last run took, and names the scripts run alone', { timeout: 60_000 }, async () => {
    const { code, output } = await runSuite(['--list']);
    expect(code, output).toBe(0);
    for (const name of ['write', 'read', 'snapshot', 'compact', 'postgres', 'peers', 'followers']) {
      expect(output).toMatch(new RegExp(`^${name}( \\(alone\\))?\\n  \\S.+\\n  last run: `, 'm'));
    }
    expect(output).toMatch(/^compact\n.*\n {2}last run: \d.* s \(\d{4}-\d{2}-\d{2}.*\.json\); --full /m);
    for (const path of ['bench/profiling/versus-commit.ts', 'bench/writes/fsync.ts', 'bench/snapshots/quick-check.ts']) {
      expect(output).toMatch(new RegExp(`^${path.replace(/\./g, '\\.')}\\n  \\S`, 'm'));
    }
  });

  it('refuses an unknown figure name', async () => {
    const { code, output } = await runSuite(['--smoke', '--only', 'nonesuch']);
    expect(code).not.toBe(0);
    expect(output).toContain('unknown figure nonesuch');
  });

  it('draws the chart from the systems of the peers figure', () => {
    const svg = renderChart(
      [
        { name: 'statelog', fsync: 'yes: ...', rps: [5000, 5200, 4900], p50: [8, 8, 9], p99: [30, 28, 31], errors: 0 },
        { name: 'NATS KV', fsync: 'no: ...', rps: [12000, 12500, 11000], p50: [3, 3, 3], p99: [19, 20, 18], errors: 0 },
      ],
      '2026-11-29',
    );
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('statelog');
    expect(svg).toContain('NATS KV *');
    expect(svg).toContain('5,000 req/s');
  });
});

describe('the stall timeline (bench/profiling/stall-trace.mjs, bench/profiling/stall-report.mjs)', () => {
  it('traces a server process and names what overlapped each slow request most', { timeout: 60_000 }, async () => {
    // The preload in a real server: its timeline file appears, in the form the report reads.
    const traced = await startStatelog({ STALL_TRACE_DIR: dir }, { entry: 'dist/server.js', nodeArgs: ['--import', join(ROOT, 'bench/profiling/stall-trace.mjs')], output: 'discard' });
    const timeline = join(dir, `stall-trace-${traced.proc.pid!}.log`);
    await traced.stop();
    expect(existsSync(timeline)).toBe(true);
    expect(readFileSync(timeline, 'utf8')).toMatch(/^(\d+ [a-z-]+ \d+\.\d\d.*\n)*$/);

    const file = join(dir, 'timeline.log');
    writeFileSync(
      file,
      [
        '1000 stall 9.00',
        '1030 pool-fdatasync 12.00',
        '1040 slow-request 35.00 PUT', // 1005 – 1040: the fdatasync (1018 – 1030) overlaps it most
        '1100 stall 20.00',
        '1110 slow-request 31.00 PUT', // 1079 – 1110: the stall (1080 – 1100)
        '1200 slow-request 16.00 PUT', // under --slow 30
      ].join('\n'),
    );
    const { stdout } = await execFileAsync(process.execPath, ['bench/profiling/stall-report.mjs', file, '--slow', '30'], { cwd: ROOT });
    expect(stdout).toContain('2 requests of 30 ms or more');
    expect(stdout).toMatch(/pool-fdatasync: 1\n/);
    expect(stdout).toMatch(/stall: 1\n/);
  });
});

describe("the standby's link (bench/postgres/standby-link.ts)", () => {
  it('relays every byte in order both ways, each way at least the delay later, and ends with its peer', async () => {
    const echo = createServer((socket) => socket.pipe(socket));
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    const link = await DelayedLink.start((echo.address() as AddressInfo).port, 5);
    try {
      const socket = connect(link.port, '127.0.0.1');
      let received = '';
      socket.setEncoding('utf8').on('data', (chunk: string) => (received += chunk));
      const sent = Array.from({ length: 200 }, (_, i) => `${i},`).join('');
      const started = performance.now();
      for (let i = 0; i < sent.length; i += 50) socket.write(sent.slice(i, i + 50));
      await vi.waitFor(() => expect(received).toBe(sent), { timeout: 5000, interval: 1 });
      // Out through the link and back: held twice.
      expect(performance.now() - started).toBeGreaterThanOrEqual(10);
      const closed = new Promise((resolve) => socket.once('close', resolve));
      socket.end();
      await closed;
    } finally {
      await link.stop();
      echo.close();
    }
  });
});
