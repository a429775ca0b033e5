// Durable PUT throughput with one and with two statelog nodes on the same PostgreSQL
// (c connections in all, split evenly over the nodes), beside the embedded SQLite store,
// measured in alternating order in each round; and the snapshot rate of both stores.
// Commits and records per commit come from pg_stat_database, to show what limits it.
//   npm run bench:postgres [-- --connections 50 --seconds 5 --rounds 3 --snapshot-keys 200000]
// PostgreSQL: STATELOG_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/postgres,
// loopback only); a database is created for the run and dropped after it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { SnapshotReader } from '../src/store/log-store.js';
import { PgStore } from '../src/store/pg-store.js';
import { SqliteStore } from '../src/store/sqlite-store.js';
import { durablePuts, flag, median, saveResult, startNode, startStatelog, summary, type LoadResult, type Server } from './lib.js';

const connections = flag('connections', 50);
const seconds = flag('seconds', 5);
const rounds = flag('rounds', 3);
const snapshotKeys = flag('snapshot-keys', 200_000);
const adminUrl = process.env.STATELOG_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
if (!['127.0.0.1', 'localhost'].includes(new URL(adminUrl).hostname)) throw new Error('STATELOG_BENCH_PG_URL must be on this machine');

const admin = new pg.Client(adminUrl);
await admin.connect();
const created: string[] = [];
async function createDatabase(suffix: string): Promise<string> {
  const name = `statelog_bench_${process.pid}_${suffix}`;
  await admin.query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'UTF8'`);
  created.push(name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Transactions committed in a database so far (the statistics lag up to a second). */
async function commits(name: string): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const { rows } = await admin.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = $1', [name]);
  return Number(rows[0]!.n);
}

interface Run {
  sqlite: LoadResult;
  pg1: LoadResult & { commitsPerSecond: number; recordsPerCommit: number };
  pg2: LoadResult & { commitsPerSecond: number; recordsPerCommit: number; perNode: number[] };
}

/** Several loads at once, summed: the cluster's throughput. */
function combine(results: LoadResult[]): LoadResult {
  return {
    requests: results.reduce((n, r) => n + r.requests, 0),
    rps: results.reduce((n, r) => n + r.rps, 0),
    p50: Math.max(...results.map((r) => r.p50)),
    p99: Math.max(...results.map((r) => r.p99)),
    non2xx: results.reduce((n, r) => n + r.non2xx, 0),
    errors: results.reduce((n, r) => n + r.errors, 0),
  };
}

async function measured(dbName: string, work: () => Promise<LoadResult[]>) {
  const before = await commits(dbName);
  const results = await work();
  const committed = (await commits(dbName)) - before;
  const total = combine(results);
  return { ...total, commitsPerSecond: committed / seconds, recordsPerCommit: total.requests / Math.max(committed, 1) };
}

async function writeRounds(): Promise<Run[]> {
  const url = await createDatabase('write');
  const dbName = created[created.length - 1]!;
  const env = { STATELOG_STORE: 'postgres', DATABASE_URL: url, STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_SYNC: 'full' };
  const servers: Server[] = [];
  try {
    const sqlite = await startStatelog({ STATELOG_SYNC: 'full' });
    servers.push(sqlite);
    const a = await startNode('src/server.ts', env);
    servers.push(a);
    const b = await startNode('src/server.ts', env);
    servers.push(b);
    const half = Math.floor(connections / 2);
    // Warm-up: JIT, caches, the first pages of each table.
    await durablePuts(sqlite.url, connections, 2);
    await durablePuts(a.url, connections, 2);
    await durablePuts(b.url, connections, 2);
    const runs: Run[] = [];
    const order = ['sqlite', 'pg1', 'pg2'] as const;
    for (let round = 0; round < rounds; round++) {
      const run: Partial<Run> = {};
      // Rotate which goes first, so drift in the machine's load hits each in turn.
      for (let i = 0; i < order.length; i++) {
        const kind = order[(i + round) % order.length]!;
        if (kind === 'pg2') {
          const perNode: number[] = [];
          const result = await measured(dbName, async () => {
            const results = await Promise.all([durablePuts(a.url, half, seconds), durablePuts(b.url, connections - half, seconds)]);
            perNode.push(...results.map((r) => r.rps));
            return results;
          });
          run.pg2 = { ...result, perNode };
        } else if (kind === 'pg1') {
          run.pg1 = await measured(dbName, async () => [await durablePuts(a.url, connections, seconds)]);
        } else {
          run.sqlite = await durablePuts(sqlite.url, connections, seconds);
        }
      }
      runs.push(run as Run);
      console.log(
        `round ${round + 1}: sqlite ${run.sqlite!.rps.toFixed(0)} req/s, postgres 1 node ${run.pg1!.rps.toFixed(0)} req/s ` +
          `(${run.pg1!.recordsPerCommit.toFixed(1)} records/commit), 2 nodes ${run.pg2!.rps.toFixed(0)} req/s ` +
          `(${run.pg2!.recordsPerCommit.toFixed(1)} records/commit)`,
      );
    }
    return runs;
  } finally {
    for (const server of servers) await server.stop();
  }
}

async function drain(snapshot: SnapshotReader): Promise<number> {
  let count = 0;
  try {
    for (let page = await snapshot.nextJson('entry', 1000); page.length > 0; page = await snapshot.nextJson('entry', 1000)) count += page.length;
  } finally {
    snapshot.close();
  }
  return count;
}

/** Keys per second of a whole snapshot, read page by page through each store's reader. */
async function snapshotRates(): Promise<{ postgres: number[]; sqlite: number[] }> {
  const url = await createDatabase('snapshot');
  const store = await PgStore.open({ url, poolSize: 2, snapshotPoolSize: 1, sync: 'full', idempotencyTtlMs: 1000 });
  const fill = new pg.Client(url);
  await fill.connect();
  // Filled by SQL: the rate of reading, not of writing, is measured here.
  await fill.query(
    `INSERT INTO log (seq, key, op, value, ts)
       SELECT g, 'key-' || lpad(g::text, 8, '0'), 'set', '{"balance":' || g || ',"currency":"EUR"}', 0
       FROM generate_series(1, $1::int) g`,
    [snapshotKeys],
  );
  await fill.query(`INSERT INTO state SELECT key, seq, true FROM log`);
  await fill.query('UPDATE meta SET head = $1, records = $1, state_keys = $1, live_keys = $1', [snapshotKeys]);
  await fill.query('VACUUM ANALYZE log');
  await fill.query('VACUUM ANALYZE state');
  await fill.end();

  const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-'));
  const path = join(dir, 'snapshot.db');
  const sqlite = new SqliteStore({ path, sync: 'normal', idempotencyTtlMs: 1000 });
  const db = new Database(path);
  db.transaction(() => {
    const log = db.prepare("INSERT INTO log (seq, key, op, value, ts) VALUES (?, ?, 'set', ?, 0)");
    const state = db.prepare('INSERT INTO state (key, seq, live) VALUES (?, ?, 1)');
    for (let i = 1; i <= snapshotKeys; i++) {
      const key = `key-${String(i).padStart(8, '0')}`;
      log.run(i, key, `{"balance":${i},"currency":"EUR"}`);
      state.run(key, i);
    }
    db.prepare('UPDATE meta SET head = ?, records = ?, state_keys = ?, live_keys = ?').run(snapshotKeys, snapshotKeys, snapshotKeys, snapshotKeys);
  })();
  db.close();

  const rates = { postgres: [] as number[], sqlite: [] as number[] };
  try {
    for (let round = 0; round < rounds; round++) {
      for (const [kind, target] of [
        ['postgres', store],
        ['sqlite', sqlite],
      ] as const) {
        const started = performance.now();
        const count = await drain(await target.openSnapshot(''));
        if (count !== snapshotKeys) throw new Error(`${kind} snapshot read ${count} keys, not ${snapshotKeys}`);
        rates[kind].push(count / ((performance.now() - started) / 1000));
      }
      console.log(`snapshot round ${round + 1}: postgres ${rates.postgres.at(-1)!.toFixed(0)} keys/s, sqlite ${rates.sqlite.at(-1)!.toFixed(0)} keys/s`);
    }
  } finally {
    await store.close();
    await sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return rates;
}

try {
  const runs = await writeRounds();
  const snapshots = await snapshotRates();
  const pick = (kind: keyof Run, field: keyof LoadResult) => summary(runs.map((r) => r[kind][field]));
  const result = {
    settings: { connections, seconds, rounds, snapshotKeys, sync: 'full', twoNodes: 'connections split evenly over the two nodes' },
    sqlite: { rps: pick('sqlite', 'rps'), p50: pick('sqlite', 'p50'), p99: pick('sqlite', 'p99') },
    postgres1: {
      rps: pick('pg1', 'rps'),
      p50: pick('pg1', 'p50'),
      p99: pick('pg1', 'p99'),
      commitsPerSecond: summary(runs.map((r) => r.pg1.commitsPerSecond)),
      recordsPerCommit: summary(runs.map((r) => r.pg1.recordsPerCommit)),
    },
    postgres2: {
      rps: pick('pg2', 'rps'),
      p50: pick('pg2', 'p50'),
      p99: pick('pg2', 'p99'),
      perNodeRps: runs.map((r) => r.pg2.perNode),
      commitsPerSecond: summary(runs.map((r) => r.pg2.commitsPerSecond)),
      recordsPerCommit: summary(runs.map((r) => r.pg2.recordsPerCommit)),
    },
    non2xx: runs.reduce((n, r) => n + r.sqlite.non2xx + r.pg1.non2xx + r.pg2.non2xx + r.sqlite.errors + r.pg1.errors + r.pg2.errors, 0),
    snapshotKeysPerSecond: { postgres: summary(snapshots.postgres), sqlite: summary(snapshots.sqlite) },
  };
  const file = saveResult(`postgres-c${connections}`, result);
  const med = (values: number[]) => median(values).toFixed(0);
  console.log(
    `durable PUT c=${connections}: sqlite ${med(runs.map((r) => r.sqlite.rps))} req/s; postgres 1 node ${med(runs.map((r) => r.pg1.rps))} req/s, ` +
      `2 nodes ${med(runs.map((r) => r.pg2.rps))} req/s; snapshot postgres ${med(snapshots.postgres)} keys/s, sqlite ${med(snapshots.sqlite)} keys/s`,
  );
  console.log(`written to ${file}`);
} finally {
  for (const name of created) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.end();
}
