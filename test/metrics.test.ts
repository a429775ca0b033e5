// /metrics after known traffic, read with a parser of the Prometheus text format.
import { readFileSync } from 'node:fs';
import parsePrometheus, { type PrometheusFamily } from 'parse-prometheus-text-format';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CompactionStats } from '../src/metrics.js';
import { json, startApp, type TestApp } from './support/helpers.js';

/** The route patterns this file's requests match, and the label of requests that matched none. */
const ROUTE_LABELS = new Set(['/v1/keys/:key', '/v1/keys', '/v1/records', '/v1/stats', '/healthz', '/readyz', '/metrics', 'unmatched']);

async function scrape(t: TestApp): Promise<{ text: string; families: Map<string, PrometheusFamily> }> {
  const res = await t.http.get('/metrics');
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  const families = parsePrometheus(res.text);
  return { text: res.text, families: new Map(families.map((family) => [family.name, family])) };
}

function family(families: Map<string, PrometheusFamily>, name: string, type: PrometheusFamily['type']): PrometheusFamily {
  const found = families.get(name);
  expect(found, name).toBeDefined();
  expect(found!.type).toBe(type);
  return found!;
}

/** The value of the one sample of a counter or gauge whose labels match `labels`. */
function value(families: Map<string, PrometheusFamily>, name: string, labels: Record<string, string> = {}): number {
  const samples = families.get(name)?.metrics ?? [];
  const matching = samples.filter((sample) => Object.entries(labels).every(([k, v]) => sample.labels?.[k] === v));
  expect(matching, `${name} ${JSON.stringify(labels)}`).toHaveLength(1);
  return Number(matching[0]!.value);
}

/**
 * One series of a histogram. The parser merges the series of a labelled histogram into
 * one, so the series' lines are picked out (without their labels) and parsed alone.
 */
function histogram(text: string, name: string, labels: Record<string, string>) {
  const pairs = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const lines = text.split('\n').flatMap((line) => {
    if (line.startsWith(`# HELP ${name} `) || line.startsWith(`# TYPE ${name} `)) return [line];
    const match = new RegExp(`^(${name}_(?:bucket|sum|count))\\{(.*)\\} (\\S+)$`).exec(line);
    if (!match) return [];
    const own = match[2]!.split(',');
    if (!pairs.every((pair) => own.includes(pair))) return [];
    const rest = own.filter((pair) => !pairs.includes(pair));
    return [`${match[1]}${rest.length ? `{${rest.join(',')}}` : ''} ${match[3]}`];
  });
  const [parsed] = parsePrometheus(lines.join('\n') + '\n');
  expect(parsed?.type).toBe('HISTOGRAM');
  const series = parsed!.metrics;
  expect(series).toHaveLength(1);
  const { buckets, count, sum } = series[0]!;
  return {
    buckets: Object.entries(buckets ?? {}).map(([le, n]) => [le === '+Inf' ? Infinity : Number(le), Number(n)] as const),
    count: Number(count),
    sum: Number(sum),
  };
}

let t: TestApp;
beforeEach(async () => {
  t = await startApp();
});
afterEach(() => t.close());

/** Known traffic: 6 records written, keys a, c, d live, b deleted. */
async function traffic(): Promise<void> {
  const expectStatus = async (request: PromiseLike<{ status: number }>, status: number) =>
    expect((await request).status).toBe(status);
  await expectStatus(t.http.put('/v1/keys/a').set(json).send({ value: 1 }), 200);
  await expectStatus(t.http.put('/v1/keys/b').set(json).send({ value: 2 }), 200);
  await expectStatus(t.http.put('/v1/keys/a').set(json).send({ value: 3 }), 200);
  await expectStatus(t.http.get('/v1/keys/a'), 200);
  await expectStatus(t.http.get('/v1/keys/missing-key-name'), 404);
  await expectStatus(t.http.delete('/v1/keys/b'), 200);
  await expectStatus(
    t.http.post('/v1/records').set(json).send({ records: [{ key: 'c', value: 1 }, { key: 'd', value: 2 }] }),
    200,
  );
  await expectStatus(t.http.get('/v1/no-such-route'), 404);
  await expectStatus(t.http.get('/v1/keys/%ZZ'), 400);
  await expectStatus(t.http.put('/v1/keys/a').set(json).send('{"value":'), 400);
}

describe('GET /metrics', () => {
  it('counts requests by method, route pattern and status, never by raw URL', async () => {
    await traffic();
    const { families } = await scrape(t);
    const requests = family(families, 'statelog_http_requests_total', 'COUNTER');
    const count = (method: string, route: string, status: string) =>
      value(families, 'statelog_http_requests_total', { method, route, status });
    expect(count('PUT', '/v1/keys/:key', '200')).toBe(3);
    expect(count('PUT', '/v1/keys/:key', '400')).toBe(1);
    expect(count('GET', '/v1/keys/:key', '200')).toBe(1);
    expect(count('GET', '/v1/keys/:key', '404')).toBe(1);
    expect(count('DELETE', '/v1/keys/:key', '200')).toBe(1);
    expect(count('POST', '/v1/records', '200')).toBe(1);
    expect(count('GET', 'unmatched', '404')).toBe(1);
    expect(count('GET', 'unmatched', '400')).toBe(1);
    for (const sample of requests.metrics) expect(ROUTE_LABELS).toContain(sample.labels?.route);
    const total = requests.metrics.reduce((sum, sample) => sum + Number(sample.value), 0);
    expect(total).toBe(10);
  });

  it('times requests in a histogram with the same labels', async () => {
    await traffic();
    const { text, families } = await scrape(t);
    family(families, 'statelog_http_request_duration_seconds', 'HISTOGRAM');
    const puts = histogram(text, 'statelog_http_request_duration_seconds', {
      method: 'PUT',
      route: '/v1/keys/:key',
      status: '200',
    });
    expect(puts.count).toBe(3);
    expect(puts.sum).toBeGreaterThan(0);
    const inf = puts.buckets.find(([le]) => le === Infinity);
    expect(inf?.[1]).toBe(3);
    // Cumulative buckets never decrease.
    const counts = puts.buckets.sort(([a], [b]) => a - b).map(([, n]) => n);
    expect(counts).toEqual([...counts].sort((a, b) => a - b));
    expect(text).not.toContain('missing-key-name');
    expect(text).not.toContain('no-such-route');
  });

  it("reports the log's figures as read at scrape time", async () => {
    await traffic();
    const { families } = await scrape(t);
    expect(value(families, 'statelog_records_written_total')).toBe(6);
    expect(value(families, 'statelog_database_up')).toBe(1);
    expect(value(families, 'statelog_log_head')).toBe(6);
    expect(value(families, 'statelog_log_records')).toBe(6);
    expect(value(families, 'statelog_live_keys')).toBe(3);
    expect(value(families, 'statelog_tombstones')).toBe(1);
    // 6 records, of which a=1, b=2 are superseded.
    expect(value(families, 'statelog_dirty_ratio')).toBeCloseTo(2 / 6, 10);
    expect(value(families, 'statelog_log_horizon')).toBe(0);
    expect(value(families, 'statelog_db_bytes')).toBeGreaterThan(0);

    await t.http.put('/v1/keys/e').set(json).send({ value: true });
    const later = await scrape(t);
    expect(value(later.families, 'statelog_log_head')).toBe(7);
    expect(value(later.families, 'statelog_records_written_total')).toBe(7);
  });

  it('times each group commit until it is durable, refused writes included', async () => {
    await Promise.all([1, 2, 3].map((n) => t.http.put(`/v1/keys/g${n}`).set(json).send({ value: n })));
    await t.http.put('/v1/keys/g4').set(json).set('if-match', '"999"').send({ value: 4 });
    const { families } = await scrape(t);
    const [groups] = family(families, 'statelog_group_commit_duration_seconds', 'HISTOGRAM').metrics;
    // The three concurrent PUTs share one group or more; the refused one commits alone.
    expect(Number(groups?.count)).toBeGreaterThanOrEqual(2);
    expect(Number(groups?.count)).toBeLessThanOrEqual(4);
    expect(Number(groups?.sum)).toBeGreaterThan(0);
  });

  it('does not count refused writes as written', async () => {
    await t.http.put('/v1/keys/a').set(json).send({ value: 1 });
    expect((await t.http.put('/v1/keys/a').set(json).set('if-none-match', '*').send({ value: 2 })).status).toBe(412);
    expect((await t.http.delete('/v1/keys/never')).status).toBe(404);
    const { families } = await scrape(t);
    expect(value(families, 'statelog_records_written_total')).toBe(1);
  });

  it("reads compaction figures from the compactor's totals", async () => {
    const before = await scrape(t);
    expect(value(before.families, 'statelog_compaction_runs_total')).toBe(0);

    expect(value(before.families, 'statelog_last_compaction_success_timestamp_seconds')).toBe(0);

    let stats: CompactionStats = {
      runs: 3,
      failures: 1,
      removed: 40,
      tombstonesRemoved: 5,
      lastDurationMs: 250,
      totalDurationMs: 1500,
      lastSuccessMs: 1_764_000_000_500,
    };
    t.app.services.metrics.watchCompaction(() => stats);
    const { families } = await scrape(t);
    expect(family(families, 'statelog_compaction_runs_total', 'COUNTER').metrics).toHaveLength(1);
    expect(value(families, 'statelog_compaction_runs_total')).toBe(3);
    expect(value(families, 'statelog_compaction_failures_total')).toBe(1);
    expect(value(families, 'statelog_compaction_removed_records_total')).toBe(40);
    expect(value(families, 'statelog_compaction_tombstones_removed_total')).toBe(5);
    expect(value(families, 'statelog_compaction_duration_seconds_total')).toBe(1.5);
    expect(value(families, 'statelog_compaction_last_duration_seconds')).toBe(0.25);
    expect(value(families, 'statelog_last_compaction_success_timestamp_seconds')).toBe(1_764_000_000.5);

    stats = { ...stats, runs: 4, removed: 41, lastDurationMs: 10, totalDurationMs: 1510 };
    const later = await scrape(t);
    expect(value(later.families, 'statelog_compaction_runs_total')).toBe(4);
    expect(value(later.families, 'statelog_compaction_removed_records_total')).toBe(41);
    expect(value(later.families, 'statelog_compaction_last_duration_seconds')).toBe(0.01);
  });

  it('stamps the last successful compaction of a real run with its end', async () => {
    const started = Date.now() / 1000;
    await t.http.put('/v1/keys/a').set(json).send({ value: 1 });
    await t.http.put('/v1/keys/a').set(json).send({ value: 2 });
    expect((await t.http.post('/v1/admin/compact')).status).toBe(200);
    const { families } = await scrape(t);
    family(families, 'statelog_last_compaction_success_timestamp_seconds', 'GAUGE');
    const stamp = value(families, 'statelog_last_compaction_success_timestamp_seconds');
    expect(stamp).toBeGreaterThanOrEqual(Math.floor(started));
    expect(stamp).toBeLessThanOrEqual(Date.now() / 1000);
  });

  it('names the running version and Node.js line in statelog_build_info', async () => {
    const { families } = await scrape(t);
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    family(families, 'statelog_build_info', 'GAUGE');
    expect(value(families, 'statelog_build_info', { version, node_version: process.version })).toBe(1);
  });

  it('times a long poll that waited as a stream, not as a request', async () => {
    const res = await t.http.get('/v1/changes?after=0&wait=0.3');
    expect(res.status).toBe(200);
    expect(res.body.records).toEqual([]);
    // One that answers at once is an ordinary request.
    await t.http.put('/v1/keys/a').set(json).send({ value: 1 });
    expect((await t.http.get('/v1/changes?after=0&wait=0.3')).status).toBe(200);
    const { text, families } = await scrape(t);
    expect(value(families, 'statelog_http_requests_total', { method: 'GET', route: '/v1/changes', status: '200' })).toBe(2);
    expect(histogram(text, 'statelog_http_request_duration_seconds', { method: 'GET', route: '/v1/changes', status: '200' }).count).toBe(1);
    const polls = histogram(text, 'statelog_stream_duration_seconds', { kind: 'long_poll' });
    expect(polls.count).toBe(1);
    expect(polls.sum).toBeGreaterThanOrEqual(0.25);
    expect(text).not.toContain('statelog_stream_duration_seconds_count{kind="sse"}');
  });

  it('counts open streams, long polls and snapshots by kind, each closed once', async () => {
    const metrics = t.app.services.metrics;
    const first = metrics.openStream('sse');
    const second = metrics.openStream('sse');
    const poll = metrics.openStream('long_poll');
    metrics.openStream('snapshot');
    let { families } = await scrape(t);
    family(families, 'statelog_open_streams', 'GAUGE');
    expect(value(families, 'statelog_open_streams', { kind: 'sse' })).toBe(2);
    expect(value(families, 'statelog_open_streams', { kind: 'long_poll' })).toBe(1);
    expect(value(families, 'statelog_open_streams', { kind: 'snapshot' })).toBe(1);

    first();
    first();
    poll();
    ({ families } = await scrape(t));
    expect(value(families, 'statelog_open_streams', { kind: 'sse' })).toBe(1);
    expect(value(families, 'statelog_open_streams', { kind: 'long_poll' })).toBe(0);
    second();
    ({ families } = await scrape(t));
    expect(value(families, 'statelog_open_streams', { kind: 'sse' })).toBe(0);
  });

  it("includes the process's default metrics", async () => {
    const { families } = await scrape(t);
    family(families, 'process_cpu_user_seconds_total', 'COUNTER');
    family(families, 'process_resident_memory_bytes', 'GAUGE');
    family(families, 'nodejs_heap_size_used_bytes', 'GAUGE');
    family(families, 'nodejs_eventloop_lag_seconds', 'GAUGE');
    family(families, 'nodejs_active_handles', 'GAUGE');
    // Gauges named like counters (promtool refuses them) are left out.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
      expect(families.has(name), name).toBe(false);
    }
  });

  it('keeps one registry per app: two apps in one process count apart', async () => {
    const other = await startApp();
    try {
      await t.http.put('/v1/keys/a').set(json).send({ value: 1 });
      await other.http.get('/healthz');
      const mine = await scrape(t);
      const theirs = await scrape(other);
      expect(value(mine.families, 'statelog_records_written_total')).toBe(1);
      expect(value(theirs.families, 'statelog_records_written_total')).toBe(0);
      expect(value(theirs.families, 'statelog_http_requests_total', { route: '/healthz' })).toBe(1);
      expect(mine.families.get('statelog_http_requests_total')!.metrics.some((s) => s.labels?.route === '/healthz')).toBe(
        false,
      );
    } finally {
      await other.close();
    }
  });
});
