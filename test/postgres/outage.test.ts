// A node whose database goes away: connections refused, connections dropped mid-query,
// sessions terminated by the server. Requests get 503 `unavailable` with Retry-After
// (never 500), the process stays up, and it recovers by itself when the database is
// back. The database is cut with a TCP proxy between the node and PostgreSQL (the
// shared server itself is never stopped), or by terminating the node's sessions.
import { get, type IncomingMessage } from 'node:http';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import parsePrometheus from 'parse-prometheus-text-format';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { toApiError } from '../../src/http/error-handler.js';
import { postgresErrorKinds } from '../../src/store/postgres/errors.js';
import { kindOf, translate } from '../../src/store/store-errors.js';
import { cuttableProxy, type CuttableProxy } from '../support/flaky-proxy.js';
import type { UrlServer } from '../support/child-server.js';
import { fixture, http, NO_SHEDDING, sleep, type Fixture } from './fixtures.js';

let f: Fixture | undefined;
let proxy: CuttableProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await f?.cleanup();
  f = undefined;
});

/** A node that reaches its database through a proxy the test can cut. */
async function nodeBehindProxy(env: Record<string, string> = {}): Promise<UrlServer> {
  f = await fixture();
  proxy = await cuttableProxy('127.0.0.1', 5432);
  const url = new URL(f.db.url);
  url.port = String(proxy.port);
  return f.spawn({ DATABASE_URL: url.toString(), ...NO_SHEDDING, ...env });
}

async function untilReady(node: UrlServer, timeoutMs = 15_000): Promise<number> {
  const started = Date.now();
  while ((await http(node.url, 'GET', '/readyz')).status !== 200) {
    if (Date.now() - started > timeoutMs) throw new Error('the node did not become ready again');
    await sleep(100);
  }
  return Date.now() - started;
}

/** The contract's answer to an outage. */
function expectUnavailable(answer: { status: number; body: unknown; headers: Headers }, what: string): void {
  expect({ what, status: answer.status, body: answer.body }).toMatchObject({
    what,
    status: 503,
    body: { error: { code: 'unavailable' } },
  });
  expect(answer.headers.get('retry-after')).toBe('1');
}

/** What every answer of a loop of requests was: statuses counted, transport errors kept. */
class Tally {
  readonly statuses = new Map<number, number>();
  readonly failures: string[] = [];
  count(status: number): void {
    this.statuses.set(status, (this.statuses.get(status) ?? 0) + 1);
  }
  get(status: number): number {
    return this.statuses.get(status) ?? 0;
  }
}

describe('the database cut off by the network', () => {
  it('answers 503 with Retry-After while it is gone, stays up, and recovers by itself', async () => {
    const node = await nodeBehindProxy();
    const other = await f!.spawn(NO_SHEDDING); // a second node with its own, working, connection
    for (const batch of [0, 1, 2, 3, 4, 5]) {
      const records = Array.from({ length: 1000 }, (_, i) => ({ key: `big/${batch}/${i}`, value: 'x'.repeat(1000) }));
      expect((await http(node.url, 'POST', '/v1/records', { records })).status).toBe(200);
    }

    // A snapshot that holds its connection between reads: its connection breaks while no
    // query is in flight (node-postgres then emits an error that nobody awaits).
    const held = await new Promise<IncomingMessage>((resolve, reject) => get(`${node.url}/v1/snapshot`, resolve).on('error', reject));
    held.pause();
    expect(held.statusCode).toBe(200);
    // Writers through the cut: plain PUTs (one statement) and idempotent ones (a
    // transaction under the lock), so that connections break in the middle of both.
    let stop = false;
    const tally = new Tally();
    const acked: { key: string; offset: number; value: number }[] = [];
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        const key = `w${w}`;
        const headers: Record<string, string> = w % 2 ? { 'idempotency-key': `w${w}-${i}` } : {};
        try {
          const answer = await http(node.url, 'PUT', `/v1/keys/${key}`, { value: i }, headers);
          tally.count(answer.status);
          if (answer.status === 200) acked.push({ key, offset: answer.body.offset, value: i });
          else await sleep(20);
        } catch (err) {
          tally.failures.push((err as Error).message);
          await sleep(20);
        }
      }
    };
    const writers = Array.from({ length: 6 }, (_, w) => writer(w));
    await sleep(300);
    await proxy!.cut();
    await sleep(200);

    const during: [string, string, unknown?][] = [
      ['PUT', '/v1/keys/k', { value: 1 }],
      ['DELETE', '/v1/keys/w0'],
      ['POST', '/v1/records', { records: [{ key: 'c', op: 'incr', by: 1 }] }],
      ['GET', '/v1/keys/w0'],
      ['GET', '/v1/keys?prefix=w'],
      ['GET', '/v1/changes?after=0'],
      ['GET', '/v1/changes?after=0&wait=1'],
      ['GET', '/v1/changes/stream?after=0'],
      ['GET', '/v1/changes/stream?snapshot=true'],
      ['GET', '/v1/snapshot'],
      ['GET', '/v1/stats'],
      ['POST', '/v1/admin/compact'],
      ['GET', '/readyz'],
    ];
    for (const [method, path, body] of during) {
      expectUnavailable(await http(node.url, method, path, body), `${method} ${path}`);
    }
    expect((await http(node.url, 'GET', '/healthz')).status).toBe(200);
    // The held snapshot was spooled before the cut: it is either served whole from the
    // spool, trailer included, or cut short without its last line; never a clean end
    // without the trailer.
    const text = await new Promise<string>((resolve) => {
      let received = '';
      held.setEncoding('utf8').on('data', (chunk: string) => (received += chunk));
      held.on('close', () => resolve(received)).resume();
    });
    expect(text.length).toBeGreaterThan(0);
    const trailer = text.endsWith('\n') && text.slice(text.lastIndexOf('\n', text.length - 2)).includes('"end":true');
    expect(held.complete).toBe(trailer);
    await sleep(1000);
    expect(node.proc.exitCode).toBeNull();

    // Meanwhile the other node writes: the cut node learns of it once it is back.
    const elsewhere = (await http(other.url, 'PUT', '/v1/keys/elsewhere', { value: 1 })).body.offset as number;
    await proxy!.restore();
    const recoveredInMs = await untilReady(node);
    await sleep(300);
    stop = true;
    await Promise.all(writers);

    expect(node.proc.exitCode).toBeNull();
    expect(tally.failures).toEqual([]);
    expect([...tally.statuses.keys()].sort()).toEqual([200, 503]);
    expect(tally.get(503)).toBeGreaterThan(0);
    expect(recoveredInMs).toBeLessThan(5000);
    // Back to normal: writes, the other node's commits, and its notifications.
    const after = (await http(node.url, 'PUT', '/v1/keys/after', { value: 2 })).body.offset as number;
    expect(after).toBeGreaterThan(elsewhere);
    expect((await http(node.url, 'GET', '/v1/keys/elsewhere')).body.offset).toBe(elsewhere);
    const poll = http(node.url, 'GET', `/v1/changes?after=${after}&wait=10`);
    await sleep(200);
    const woken = (await http(other.url, 'PUT', '/v1/keys/woken', { value: 3 })).body.offset as number;
    expect((await poll).body.records.map((r: { offset: number }) => r.offset)).toEqual([woken]);
    // Every acknowledged write is there: the last acknowledged value of each key is at
    // its offset or was overwritten by a later write.
    const state = await f!.connect();
    const { rows } = await state.query<{ key: string; seq: number }>("SELECT key, seq::int FROM state WHERE key LIKE 'w%'");
    const offsets = new Map(rows.map((row) => [row.key, row.seq]));
    for (const write of acked) expect(offsets.get(write.key)).toBeGreaterThanOrEqual(write.offset);
    // The outage was logged as such, not as a failure of the server.
    const logs = node.logs();
    expect(logs.some((line) => line.msg === 'the database is unavailable')).toBe(true);
    expect(logs.filter((line) => line.msg === 'request failed' && line.level === 50)).toEqual([]);
  }, 60_000);

  it('answers 503 after STATELOG_PG_QUERY_TIMEOUT_MS (reads) or STATELOG_WRITE_TIMEOUT_MS (writes) when the network drops every packet, and recovers', async () => {
    const timeoutMs = 400;
    const node = await nodeBehindProxy({ STATELOG_PG_QUERY_TIMEOUT_MS: String(timeoutMs), STATELOG_WRITE_TIMEOUT_MS: String(timeoutMs) });
    expect((await http(node.url, 'PUT', '/v1/keys/k', { value: 1 })).status).toBe(200);
    // Nothing is refused or reset: without a timeout these would wait for TCP to give up.
    proxy!.stall();
    const during: [string, string, unknown?, Record<string, string>?][] = [
      ['GET', '/v1/keys/k'],
      ['PUT', '/v1/keys/k', { value: 2 }],
      ['PUT', '/v1/keys/k', { value: 3 }, { 'idempotency-key': 'stalled' }],
      ['GET', '/v1/keys'],
    ];
    for (const [method, path, body, headers] of during) {
      const started = Date.now();
      expectUnavailable(await http(node.url, method, path, body, headers), `${method} ${path}`);
      // A statement's timeout, or the wait for a new connection, which stalls too and is
      // bounded by the same setting.
      expect(Date.now() - started).toBeLessThan(timeoutMs * 5);
    }
    await proxy!.restore();
    await untilReady(node);
    await vi.waitFor(async () => expect((await http(node.url, 'PUT', '/v1/keys/k', { value: 4 })).status).toBe(200), { timeout: 15_000, interval: 200 });
    expect((await http(node.url, 'GET', '/v1/keys/k')).body.value).toBe(4);
  }, 90_000);
});

/** /metrics, parsed: every sample without labels, by name. */
async function scrape(node: UrlServer): Promise<Map<string, number>> {
  const res = await fetch(`${node.url}/metrics`);
  expect(res.status).toBe(200);
  const families = parsePrometheus(await res.text());
  return new Map(families.filter((f) => f.metrics.length === 1).map((f) => [f.name, Number(f.metrics[0]!.value)]));
}

describe("the compactor's timer while the database is cut off", () => {
  it('logs and counts each failed check, keeps the process up, and compacts again once the database is back', async () => {
    const node = await nodeBehindProxy({ STATELOG_COMPACT_INTERVAL_MS: '200', STATELOG_MIN_DIRTY_RATIO: '0' });
    const supersede = async () => {
      for (let i = 0; i < 3; i++) expect((await http(node.url, 'PUT', '/v1/keys/k', { value: i })).status).toBe(200);
    };
    /** Waits until a timed run has compacted k's records down to its latest one. */
    const untilCompacted = async (runs: number) => {
      for (;;) {
        const metrics = await scrape(node);
        if (metrics.get('statelog_compaction_runs_total')! >= runs && metrics.get('statelog_log_records') === 1) return metrics;
        await sleep(100);
      }
    };
    await supersede();
    const before = await untilCompacted(1);
    expect(before.get('statelog_compaction_failures_total')).toBe(0);

    await proxy!.cut();
    await sleep(1500);
    // /metrics still answers, with the compactor's figures and without the log's.
    const during = await scrape(node);
    expect(during.get('statelog_database_up')).toBe(0);
    expect(during.has('statelog_log_head')).toBe(false);
    // About one failed check a period (200 ms) for 1.5 s.
    expect(during.get('statelog_compaction_failures_total')).toBeGreaterThanOrEqual(3);
    expect(during.get('statelog_compaction_runs_total')).toBe(before.get('statelog_compaction_runs_total'));
    expect(node.proc.exitCode).toBeNull();

    await proxy!.restore();
    await untilReady(node);
    const failures = (await scrape(node)).get('statelog_compaction_failures_total')!;
    await supersede();
    const after = await untilCompacted(before.get('statelog_compaction_runs_total')! + 1);
    expect(after.get('statelog_database_up')).toBe(1);
    // The next periods after the database came back failed no more.
    expect(after.get('statelog_compaction_failures_total')).toBe(failures);

    const logs = node.logs();
    const checks = logs.filter((line) => line.msg === 'compaction check failed; it is retried at the next period');
    expect(checks.length).toBeGreaterThanOrEqual(3);
    expect(checks.every((line) => line.level === 50 && line.module === 'compactor')).toBe(true);
    // No unhandled rejection or uncaught exception (close-with-grace would log it and exit).
    expect(logs.filter((line) => line.msg === 'fatal error, shutting down')).toEqual([]);
    expect(node.stderr()).toBe('');
    expect(node.proc.exitCode).toBeNull();
  }, 60_000);
});

describe('sessions terminated by the database server (57P01 admin_shutdown)', () => {
  it('answers the writes waiting in them 503, not 500, and goes on with new sessions', async () => {
    f = await fixture();
    const node = await f.spawn(NO_SHEDDING);
    const admin = await f.connect();
    expect((await http(node.url, 'PUT', '/v1/keys/before', { value: 0 })).status).toBe(200);

    // Writes wait for the meta row, held here, so their statements are in flight when
    // their sessions end. A node commits one group at a time: each group in turn waits
    // and has its session ended.
    await admin.query('BEGIN');
    await admin.query('SELECT head FROM meta WHERE id = 1 FOR UPDATE');
    let settled = false;
    const writes = Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        http(node.url, 'PUT', `/v1/keys/k${i}`, { value: i }, i % 2 ? { 'idempotency-key': `t${i}` } : {}),
      ),
    ).finally(() => (settled = true));
    const terminator = await f.connect();
    let terminated = 0;
    while (!settled) {
      await sleep(200);
      const { rows } = await terminator.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'statelog' AND wait_event_type = 'Lock'`,
      );
      terminated += rows[0]!.n;
    }
    const answers = await writes;
    await admin.query('ROLLBACK');
    expect(terminated).toBeGreaterThan(0);

    for (const answer of answers) expectUnavailable(answer, 'a write whose session was terminated');
    expect(node.proc.exitCode).toBeNull();
    for (let i = 0; i < 4; i++) expect((await http(node.url, 'PUT', `/v1/keys/k${i}`, { value: i })).status).toBe(200);
    expect((await http(node.url, 'GET', '/readyz')).status).toBe(200);
  }, 30_000);
});

describe('which errors mean that the database is unavailable', () => {
  /** A server that accepts connections and never says a word: connecting times out. */
  async function silentServer(): Promise<{ port: number; server: Server; sockets: Set<Socket> }> {
    const sockets = new Set<Socket>();
    const server = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { port: (server.address() as AddressInfo).port, server, sockets };
  }

  const error = (promise: Promise<unknown>) => promise.then(() => new Error('no error'), (err: Error) => err);

  it('the errors node-postgres gives for an unreachable or dropped database: 503 with Retry-After', async () => {
    f = await fixture();
    const silent = await silentServer();
    proxy = await cuttableProxy('127.0.0.1', 5432);
    try {
      const found: Error[] = [];
      // Refused: nothing listens.
      await proxy.cut();
      found.push(await error(new pg.Client({ host: '127.0.0.1', port: proxy.port, user: 'postgres' }).connect()));
      await proxy.restore();
      // Connection timeouts: a client's, a pool's, and a pool's wait for a free connection.
      const silently = { host: '127.0.0.1', port: silent.port, connectionTimeoutMillis: 100 };
      found.push(await error(new pg.Client(silently).connect()));
      const pool = new pg.Pool({ ...silently, max: 1 });
      found.push(...(await Promise.all([error(pool.query('SELECT 1')), error(pool.query('SELECT 1'))])));
      await pool.end();
      // Dropped mid-query, and the client it leaves behind.
      const url = new URL(f.db.url);
      url.port = String(proxy.port);
      const dropped = new pg.Client({ connectionString: url.toString() });
      dropped.on('error', () => {});
      await dropped.connect();
      const sleeping = error(dropped.query('SELECT pg_sleep(5)'));
      await sleep(100);
      await proxy.cut();
      found.push(await sleeping);
      found.push(await error(dropped.query('SELECT 1')));
      // Terminated by the server.
      const victim = await f.connect();
      victim.on('error', () => {});
      const killer = await f.connect();
      const waiting = error(victim.query('SELECT pg_sleep(5)'));
      await sleep(100);
      await killer.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1', ['SELECT pg_sleep(5)']);
      found.push(await waiting);

      expect(found.map((err) => (err as { code?: string }).code ?? err.message)).toEqual([
        'ECONNREFUSED',
        'timeout expired',
        'Connection terminated due to connection timeout',
        'timeout exceeded when trying to connect',
        'Connection terminated unexpectedly',
        'Client has encountered a connection error and is not queryable',
        '57P01',
      ]);
      for (const err of found) {
        expect(kindOf(err, postgresErrorKinds)).toBe('unavailable');
        const answer = toApiError(translate(err, postgresErrorKinds) as Error);
        expect([answer.statusCode, answer.code, answer.headers]).toEqual([503, 'unavailable', { 'retry-after': '1' }]);
      }
    } finally {
      for (const socket of silent.sockets) socket.destroy();
      silent.server.close();
    }
  });

  it('a statement the database refuses is still a 500', async () => {
    f = await fixture();
    const client = await f.connect();
    const refused = [
      await error(client.query('SELEC 1')),
      await error(client.query('SELECT 1/0')),
      await error(client.query('SELECT * FROM no_such_table')),
    ];
    expect(refused.map((err) => (err as { code?: string }).code)).toEqual(['42601', '22012', '42P01']);
    for (const err of refused) {
      expect(kindOf(err, postgresErrorKinds)).toBe(null);
      expect(toApiError(translate(err, postgresErrorKinds) as Error).statusCode).toBe(500);
    }
  });
});
