// Tenants: PUT and GET rates of tokens limited to key prefixes, 100 entries in the token
// file, each request with the token of its key's prefix, against the same server with no
// tokens (target: >= 0.95 x for both), and the bare fastify routes as the reference the
// generator must drive faster than statelog for the ratio to mean anything; the three in
// short interleaved rounds in one run, with the server's CPU time a request beside each
// rate. Then the delay from commit to receipt of a stream subscriber with a scoped token
// beside one with an unscoped token, both watching the same writes.
//   npm run bench -- --only tenants
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HttpClient, type HttpRequest } from '../shared/closed-loop.js';
import { describeCpu, measureCpu } from '../shared/cpu-share.js';
import { alternate, ratios, type Figure, type Metric, type RunSettings } from '../shared/figure.js';
import { percentile, sleep, startBare, startStatelog, type Server } from '../shared/lib.js';
import { load, prebuilt, type LoadResult } from '../shared/load.js';

const ENTRIES = 100;
const KEYS_PER_ENTRY = 100;
const CONNECTIONS = 50;
const ROOT_SECRET = 'bench-root-secret';

const secretOf = (entry: number) => `bench-secret-${entry}-${'s'.repeat(24)}`;
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** 100 entries, entry i limited to t<i>/, and one unscoped admin. */
function tokenFile(dir: string): string {
  const entries: Record<string, unknown>[] = Array.from({ length: ENTRIES }, (_, i) => ({ name: `svc-${i}`, sha256: sha256(secretOf(i)), role: 'write', prefixes: [`t${i}/`] }));
  entries.push({ name: 'root', sha256: sha256(ROOT_SECRET), role: 'admin' });
  const path = join(dir, 'tokens.json');
  writeFileSync(path, JSON.stringify(entries));
  return path;
}

/** A request on a random key of a random entry, with that entry's token. */
function scopedRequest(method: 'PUT' | 'GET'): HttpRequest {
  const entry = Math.floor(Math.random() * ENTRIES);
  const path = `/v1/keys/t${entry}%2Fk${Math.floor(Math.random() * KEYS_PER_ENTRY)}`;
  const headers = { authorization: `Bearer ${secretOf(entry)}` };
  return method === 'PUT' ? { method, path, headers, body: `{"value":{"n":${Math.floor(Math.random() * 1e6)}}}` } : { method, path, headers };
}

async function fill(url: string, secret: (entry: number) => string | null): Promise<void> {
  const client = new HttpClient(url, 1);
  try {
    for (let entry = 0; entry < ENTRIES; entry++) {
      const records = Array.from({ length: KEYS_PER_ENTRY }, (_, k) => `{"key":"t${entry}/k${k}","value":${k}}`);
      const token = secret(entry);
      await client.expectOk({ method: 'POST', path: '/v1/records', body: `{"records":[${records.join(',')}]}`, ...(token ? { headers: { authorization: `Bearer ${token}` } } : {}) });
    }
  } finally {
    await client.close();
  }
}

/**
 * scoped: 100 scoped entries in the token file; open: no tokens; bare: the bare fastify
 * routes (bench/writes/bare-server.ts), the reference that shows the generator can drive a
 * server faster than statelog (else the ratio measures the generator).
 */
type Side = 'scoped' | 'open' | 'bare';
const SIDES = ['scoped', 'open', 'bare'] as const;

interface Measured extends LoadResult {
  /** The server process's CPU time a request, in microseconds. */
  cpuMicros: number;
}

async function rates(settings: RunSettings, dir: string): Promise<Record<'PUT' | 'GET', Record<Side, Measured[]>>> {
  const servers: Record<Side, Server> = {
    scoped: await startStatelog({ STATELOG_TOKENS_FILE: tokenFile(dir) }),
    open: await startStatelog(),
    bare: await startBare(),
  };
  try {
    await fill(servers.scoped.url, secretOf);
    await fill(servers.open.url, () => null);
    const result = {} as Record<'PUT' | 'GET', Record<Side, Measured[]>>;
    for (const method of ['PUT', 'GET'] as const) {
      const requests = prebuilt(() => scopedRequest(method));
      // The other servers are sent the same bytes: the header is there, and nothing reads it.
      const run = (side: Side, seconds: number) => load({ url: servers[side].url, connections: CONNECTIONS, seconds, requests });
      for (const side of SIDES) await run(side, settings.warmupSeconds);
      // Short rounds, the sides' order rotated each round: the machine's drift falls on every side alike.
      result[method] = await alternate(settings.rounds, SIDES, async (side, round) => {
        const { result: loaded, cpu } = await measureCpu({ server: () => [servers[side].proc.pid!] }, () => run(side, settings.seconds), (r) => r.generatorCores);
        settings.log(`${method} round ${round + 1}: ${side} ${loaded.rps.toFixed(0)} req/s, p99 ${loaded.p99.toFixed(2)} ms; ${describeCpu(cpu)}`);
        return { ...loaded, cpuMicros: loaded.rps > 0 ? ((cpu.cores.server ?? 0) / loaded.rps) * 1e6 : 0 };
      });
    }
    return result;
  } finally {
    for (const side of SIDES) await servers[side].stop();
  }
}

/** Delays (ms) from each record's commit (its ts) to its receipt, on a stream opened with `secret` and `query`. */
function subscribe(url: string, secret: string, query: string): { delays: number[]; ready: Promise<void>; close(): void } {
  const delays: number[] = [];
  let opened!: () => void;
  const ready = new Promise<void>((resolve) => (opened = resolve));
  const request = http.get(`${url}/v1/changes/stream?${query}`, { headers: { authorization: `Bearer ${secret}` } }, (res) => {
    res.setEncoding('utf8');
    let buffer = '';
    res.on('data', (chunk: string) => {
      const now = Date.now();
      buffer += chunk;
      opened();
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = /^event: record\ndata: (.*)$/m.exec(event)?.[1];
        if (data) delays.push(now - (JSON.parse(data) as { ts: number }).ts);
      }
    });
  });
  request.on('error', () => {});
  return { delays, ready, close: () => request.destroy() };
}

async function streamDelays(settings: RunSettings, dir: string): Promise<Record<'scoped' | 'unscoped', number[]>> {
  const server = await startStatelog({ STATELOG_TOKENS_FILE: tokenFile(dir) });
  const writer = new HttpClient(server.url, 1);
  try {
    // The scoped token (t0/'s) asks for everything it may see; the unscoped one asks for
    // t0/: both are sent the same records.
    const scoped = subscribe(server.url, secretOf(0), 'after=0');
    const unscoped = subscribe(server.url, ROOT_SECRET, 'after=0&prefix=t0%2F');
    await Promise.all([scoped.ready, unscoped.ready]);
    // A fixed count: enough delays for a p99, whatever the rounds' length.
    const writes = settings.smoke ? 50 : 2000;
    for (let i = 0; i < writes; i++) {
      // One write every 5 ms, each to t0/ and to another entry's prefix that neither sees.
      const records = `{"records":[{"key":"t0/k${i % KEYS_PER_ENTRY}","value":${i}},{"key":"t1/k${i % KEYS_PER_ENTRY}","value":${i}}]}`;
      await writer.expectOk({ method: 'POST', path: '/v1/records', body: records, headers: { authorization: `Bearer ${ROOT_SECRET}` } });
      await sleep(5);
    }
    await sleep(500);
    scoped.close();
    unscoped.close();
    return { scoped: scoped.delays, unscoped: unscoped.delays };
  } finally {
    await writer.close();
    await server.stop();
  }
}

export const tenantsFigure: Figure = {
  name: 'tenants',
  title: 'PUT and GET with 100 scoped token entries against no tokens; a scoped stream subscriber beside an unscoped one',
  async run(asked) {
    // Three times the rounds, each half as long: a ratio of two rates needs more rounds than either rate.
    const settings = asked.smoke ? asked : { ...asked, rounds: asked.rounds * 3, seconds: asked.seconds / 2 };
    const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-tenants-'));
    try {
      const measured = await rates(settings, dir);
      const delays = await streamDelays(asked, dir);
      const metrics: Metric[] = [];
      for (const method of ['PUT', 'GET'] as const) {
        const rps = (side: Side) => measured[method][side].map((r) => r.rps);
        const cpu = (side: Side) => measured[method][side].map((r) => r.cpuMicros);
        metrics.push(
          { label: `${method}, 100 scoped tokens`, unit: 'req/s', values: rps('scoped') },
          { label: `${method}, no tokens`, unit: 'req/s', values: rps('open') },
          { label: `${method}, bare fastify route`, unit: 'req/s', values: rps('bare') },
          { label: `ratio ${method} scoped / no tokens`, unit: '×', values: ratios(rps('scoped'), rps('open')), target: { op: '>=', value: 0.95 } },
          // Below 1, the generator and not statelog set both rates, and the ratio above says nothing.
          { label: `ratio ${method} bare / no tokens (the generator's headroom)`, unit: '×', values: ratios(rps('bare'), rps('open')), target: { op: '>=', value: 1.1 } },
          { label: `${method} server CPU a request, 100 scoped tokens`, unit: 'µs', values: cpu('scoped') },
          { label: `${method} server CPU a request, no tokens`, unit: 'µs', values: cpu('open') },
          { label: `ratio ${method} server CPU a request, scoped / no tokens`, unit: '×', values: ratios(cpu('scoped'), cpu('open')), target: { op: '<=', value: 1.05 } },
          { label: `${method} p99, 100 scoped tokens`, unit: 'ms', values: measured[method].scoped.map((r) => r.p99) },
          { label: `${method} p99, no tokens`, unit: 'ms', values: measured[method].open.map((r) => r.p99) },
        );
      }
      for (const who of ['scoped', 'unscoped'] as const) {
        metrics.push(
          { label: `stream delay p50, ${who} token`, unit: 'ms', values: [percentile(delays[who], 50)] },
          { label: `stream delay p99, ${who} token`, unit: 'ms', values: [percentile(delays[who], 99)] },
        );
      }
      const failed = Object.values(measured).flatMap((sides) => Object.values(sides).flat()).reduce((n, r) => n + r.errors, 0);
      return {
        scale: `${ENTRIES} token entries of ${KEYS_PER_ENTRY} keys each, ${CONNECTIONS} connections, ${settings.seconds} s a side a round; stream: up to 200 writes/s of 2 records, one in the subscribers' prefix`,
        settings: { entries: ENTRIES, connections: CONNECTIONS, seconds: settings.seconds, rounds: settings.rounds, failedRequests: failed, streamRecords: { scoped: delays.scoped.length, unscoped: delays.unscoped.length } },
        metrics,
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
