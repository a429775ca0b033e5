// Durable PUT throughput with one and with two statelog nodes on the same PostgreSQL
// (c connections in all, split evenly over the nodes), beside the embedded SQLite store,
// rotating the order in each round; and the snapshot rate of both stores. Commits and
// records per commit come from pg_stat_database, to show what limits it.
//   npm run bench -- --only postgres
// PostgreSQL: STATELOG_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/postgres,
// loopback only); a database is created for the run and dropped after it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { SnapshotReader } from '../../src/store/log-store.js';
import { PgStore } from '../../src/store/postgres/store.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { HttpClient, type LoopResult } from '../shared/closed-loop.js';
import { describeCpu, measureCpu, pidsNamed, type CpuShare } from '../shared/cpu-share.js';
import { alternate, ratios, type Figure, type RunSettings } from '../shared/figure.js';
import { startStatelog, type Server } from '../shared/lib.js';
import { Databases, putLoad } from './shared.js';

const ADMIN_URL = process.env.STATELOG_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

type Side = 'sqlite' | 'pg1' | 'pg2';
type Run = LoopResult & { cpu: CpuShare; commitsPerSecond?: number; recordsPerCommit?: number };

async function writeRounds(settings: RunSettings, dbs: Databases, connections: number): Promise<Record<Side, Run[]>> {
  const { name, url } = await dbs.create('write');
  const env = { STATELOG_STORE: 'postgres', DATABASE_URL: url };
  const servers: Server[] = [];
  const clients: HttpClient[] = [];
  try {
    for (const start of [() => startStatelog(), () => startStatelog(env), () => startStatelog(env)]) {
      const server = await start();
      servers.push(server);
      clients.push(new HttpClient(server.url, connections));
    }
    const targets: Record<Side, HttpClient[]> = { sqlite: [clients[0]!], pg1: [clients[1]!], pg2: [clients[1]!, clients[2]!] };
    for (const side of ['sqlite', 'pg1', 'pg2'] as const) await putLoad(targets[side], connections, settings.warmupSeconds);
    const statelogPids = () => servers.map((server) => server.proc.pid!);
    const measured = (side: Side) =>
      measureCpu({ statelog: statelogPids, PostgreSQL: () => pidsNamed('postgres') }, () => putLoad(targets[side], connections, settings.seconds));
    return await alternate(settings.rounds, ['sqlite', 'pg1', 'pg2'] as const, async (side, round) => {
      if (side === 'sqlite') {
        const { result, cpu } = await measured(side);
        settings.log(`round ${round + 1}: sqlite ${result.rps.toFixed(0)} req/s; ${describeCpu(cpu)}`);
        return { ...result, cpu };
      }
      const before = await dbs.commits(name);
      const { result, cpu } = await measured(side);
      const committed = (await dbs.commits(name)) - before;
      const run = { ...result, cpu, commitsPerSecond: committed / settings.seconds, recordsPerCommit: result.requests / Math.max(committed, 1) };
      settings.log(`round ${round + 1}: ${side} ${run.rps.toFixed(0)} req/s, ${run.recordsPerCommit.toFixed(1)} records a commit; ${describeCpu(cpu)}`);
      return run;
    });
  } finally {
    for (const client of clients) await client.close();
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
async function snapshotRates(settings: RunSettings, dbs: Databases, keys: number): Promise<Record<'postgres' | 'sqlite', number[]>> {
  const { url } = await dbs.create('snapshot');
  const store = await PgStore.open({ url, poolSize: 2, snapshotPoolSize: 1, sync: 'full', idempotencyTtlMs: 1000 });
  const fill = new pg.Client(url);
  await fill.connect();
  // Filled by SQL: the rate of reading, not of writing, is measured here.
  await fill.query(
    `INSERT INTO log (seq, key, op, value, ts)
       SELECT g, 'key-' || lpad(g::text, 8, '0'), 'set', '{"balance":' || g || ',"currency":"EUR"}', 0
       FROM generate_series(1, $1::int) g`,
    [keys],
  );
  await fill.query(`INSERT INTO state SELECT key, seq, true FROM log`);
  await fill.query('UPDATE meta SET head = $1, records = $1, state_keys = $1, live_keys = $1', [keys]);
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
    for (let i = 1; i <= keys; i++) {
      const key = `key-${String(i).padStart(8, '0')}`;
      log.run(i, key, `{"balance":${i},"currency":"EUR"}`);
      state.run(key, i);
    }
    db.prepare('UPDATE meta SET head = ?, records = ?, state_keys = ?, live_keys = ?').run(keys, keys, keys, keys);
  })();
  db.close();

  try {
    return await alternate(settings.rounds, ['postgres', 'sqlite'] as const, async (kind, round) => {
      const started = performance.now();
      const count = await drain(await (kind === 'postgres' ? store : sqlite).openSnapshot(''));
      if (count !== keys) throw new Error(`${kind} snapshot read ${count} keys, not ${keys}`);
      const rate = count / ((performance.now() - started) / 1000);
      settings.log(`snapshot round ${round + 1}: ${kind} ${rate.toFixed(0)} keys/s`);
      return rate;
    });
  } finally {
    await store.close();
    await sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export const postgresFigure: Figure = {
  name: 'postgres',
  title: 'PostgreSQL store: one node and two nodes beside SQLite, PUT c = 50',
  async run(settings) {
    if (!['127.0.0.1', 'localhost'].includes(new URL(ADMIN_URL).hostname)) throw new Error('STATELOG_BENCH_PG_URL must be on this machine');
    const connections = 50;
    const snapshotKeys = settings.smoke ? 2_000 : settings.full ? 200_000 : 50_000;
    const admin = new pg.Client(ADMIN_URL);
    await admin.connect();
    const dbs = new Databases(admin, ADMIN_URL);
    try {
      const version = (await admin.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v;
      const runs = await writeRounds(settings, dbs, connections);
      const snapshots = await snapshotRates(settings, dbs, snapshotKeys);
      const pick = (side: Side, field: 'rps' | 'p99' | 'recordsPerCommit') => runs[side].map((r) => r[field] ?? NaN);
      return {
        scale: `${connections} connections in all (split evenly over the two nodes), ${settings.seconds} s a side a round, STATELOG_SYNC=full; snapshots of ${snapshotKeys.toLocaleString()} keys`,
        settings: { connections, seconds: settings.seconds, rounds: settings.rounds, snapshotKeys, sync: 'full', failedRequests: Object.values(runs).flat().reduce((n, r) => n + r.errors, 0) },
        versions: { PostgreSQL: version },
        metrics: [
          { label: 'SQLite PUT', unit: 'req/s', values: pick('sqlite', 'rps') },
          { label: 'PostgreSQL, 1 node PUT', unit: 'req/s', values: pick('pg1', 'rps') },
          { label: 'PostgreSQL, 2 nodes PUT', unit: 'req/s', values: pick('pg2', 'rps') },
          { label: 'ratio 2 nodes / 1 node (req/s)', unit: '×', values: ratios(pick('pg2', 'rps'), pick('pg1', 'rps')) },
          { label: 'SQLite p99', unit: 'ms', values: pick('sqlite', 'p99') },
          { label: 'PostgreSQL, 1 node p99', unit: 'ms', values: pick('pg1', 'p99') },
          { label: 'PostgreSQL, 2 nodes p99', unit: 'ms', values: pick('pg2', 'p99') },
          { label: 'PostgreSQL, 1 node records a commit', unit: 'records', values: pick('pg1', 'recordsPerCommit') },
          { label: 'PostgreSQL, 2 nodes records a commit', unit: 'records', values: pick('pg2', 'recordsPerCommit') },
          // What limits the second node: the cores of this one machine, which the nodes,
          // the database and the load generator share.
          { label: 'PostgreSQL, 1 node: machine CPU busy', unit: '%', values: runs.pg1.map((r) => r.cpu.machineBusy * 100) },
          { label: 'PostgreSQL, 2 nodes: machine CPU busy', unit: '%', values: runs.pg2.map((r) => r.cpu.machineBusy * 100) },
          { label: 'PostgreSQL, 2 nodes: cores used by PostgreSQL', unit: 'cores', values: runs.pg2.map((r) => r.cpu.cores.PostgreSQL!) },
          { label: 'PostgreSQL, 2 nodes: cores used by the statelog nodes', unit: 'cores', values: runs.pg2.map((r) => r.cpu.cores.statelog!) },
          { label: 'PostgreSQL, 2 nodes: cores used by the load generator', unit: 'cores', values: runs.pg2.map((r) => r.cpu.cores['load generator']!) },
          { label: 'snapshot, PostgreSQL', unit: 'keys/s', values: snapshots.postgres },
          { label: 'snapshot, SQLite', unit: 'keys/s', values: snapshots.sqlite },
        ],
        details: { runs, snapshots },
      };
    } finally {
      await dbs.dropAll();
      await admin.end();
    }
  },
};
