// Why the log has no index by key (docs/key-history.md): on a large log, the query plan
// and median time of an unbounded history query with and without a (key, seq) index,
// on SQLite and PostgreSQL, for a key with many versions and a key the log does not
// hold; the time of the bounded page the store runs instead; and what the index costs
// the SQLite write path (ONLY=writes). Usage:
//   tsx bench/reads/history-index.ts [records] [keys]   (defaults 1,000,000 and 10,000)
//   ONLY=sqlite|writes|postgres to run one part
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { createTestDatabase } from '../../harness/pg-database.js';
import { fillLog, keyName } from '../../harness/fill-log.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { HISTORY_SCAN_RECORDS, type WriteRequest } from '../../src/store/log-store.js';
import { KEY_HISTORY_SQL } from '../../src/store/sqlite/sql.js';
import { KEY_HISTORY_SQL as PG_KEY_HISTORY_SQL } from '../../src/store/postgres/sql.js';

const records = Number(process.argv[2] ?? 1_000_000);
const keys = Number(process.argv[3] ?? 10_000);
const HISTORY = 'SELECT seq, op, value, ts FROM log WHERE key = $key AND seq < $before ORDER BY seq DESC LIMIT 101';
const probes = { 'key with versions': keyName(keys / 2), 'key not in the log': 'no-such-key' };

function median(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function time(run: () => unknown | Promise<unknown>, rounds = 7): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const start = performance.now();
    await run();
    samples.push(performance.now() - start);
  }
  return median(samples);
}

async function sqlite(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'history-index-'));
  try {
    const db = new Database(join(dir, 'log.db'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = OFF');
    db.exec(`CREATE TABLE log (seq INTEGER PRIMARY KEY, key TEXT NOT NULL, op TEXT NOT NULL, value TEXT, ts INTEGER NOT NULL)`);
    const insert = db.prepare('INSERT INTO log VALUES (?, ?, ?, ?, ?)');
    const fill = performance.now();
    db.transaction(() => {
      for (let seq = 1; seq <= records; seq++) insert.run(seq, keyName(seq % keys), 'set', `{"v":${seq}}`, seq);
    })();
    console.log(`sqlite: filled ${records} records over ${keys} keys in ${(performance.now() - fill).toFixed(0)} ms`);
    const sql = HISTORY.replaceAll('$', '@');
    for (const indexed of [false, true]) {
      if (indexed) {
        const start = performance.now();
        db.exec('CREATE INDEX log_key_seq ON log (key, seq)');
        console.log(`sqlite: CREATE INDEX took ${(performance.now() - start).toFixed(0)} ms`);
      }
      if (!indexed) {
        const bounded = db.prepare(KEY_HISTORY_SQL);
        const params = { key: probes['key not in the log'], before: records + 1, limit: 101, scan: HISTORY_SCAN_RECORDS };
        const ms = await time(() => bounded.all(params));
        console.log(`sqlite bounded page (${HISTORY_SCAN_RECORDS} records examined), no index: median ${ms.toFixed(3)} ms`);
      }
      const query = db.prepare(sql);
      const plan = db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all({ key: 'x', before: records + 1 }) as { detail: string }[];
      console.log(`sqlite ${indexed ? 'with' : 'without'} index: plan: ${plan.map((row) => row.detail).join('; ')}`);
      for (const [label, key] of Object.entries(probes)) {
        const ms = await time(() => query.all({ key, before: records + 1 }));
        console.log(`  ${label}: median ${ms.toFixed(3)} ms`);
      }
      // What the index costs a write: appending more records, one statement each.
      const more = 50_000;
      const base = records + (indexed ? more : 0);
      const start = performance.now();
      db.transaction(() => {
        for (let i = 1; i <= more; i++) insert.run(base + i, keyName(i % keys), 'set', `{"v":${i}}`, i);
      })();
      console.log(`  ${more} more inserts: ${(performance.now() - start).toFixed(0)} ms`);
    }
    db.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function postgres(): Promise<void> {
  const database = await createTestDatabase();
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    await client.query(`CREATE TABLE log (seq bigint PRIMARY KEY, key text COLLATE "C" NOT NULL, op text NOT NULL, value text, ts bigint NOT NULL)`);
    const fill = performance.now();
    await client.query(
      `INSERT INTO log SELECT g, 'key-' || lpad((g % $2)::text, 6, '0'), 'set', '{"v":' || g || '}', g FROM generate_series(1, $1::bigint) g`,
      [records, keys],
    );
    await client.query('VACUUM ANALYZE log');
    console.log(`postgres: filled ${records} records in ${(performance.now() - fill).toFixed(0)} ms`);
    {
      // The bounded page the store runs (its meta row made here as the migrations would).
      await client.query('CREATE TABLE meta (id integer PRIMARY KEY, head bigint NOT NULL)');
      await client.query('INSERT INTO meta VALUES (1, $1)', [records]);
      const params = [probes['key not in the log'], records + 1, 101, null, HISTORY_SCAN_RECORDS];
      const { rows } = await client.query(`EXPLAIN (ANALYZE) ${PG_KEY_HISTORY_SQL}`, params);
      const plan = rows.map((row: Record<string, string>) => row['QUERY PLAN']);
      console.log(`postgres bounded page, no index:\n    ${plan.join('\n    ')}`);
      const ms = await time(() => client.query(PG_KEY_HISTORY_SQL, params));
      console.log(`postgres bounded page (${HISTORY_SCAN_RECORDS} records examined), no index: median ${ms.toFixed(3)} ms`);
    }
    const sql = HISTORY.replace('$key', '$1').replace('$before', '$2');
    for (const indexed of [false, true]) {
      if (indexed) {
        const start = performance.now();
        await client.query('CREATE INDEX log_key_seq ON log (key, seq)');
        await client.query('ANALYZE log');
        console.log(`postgres: CREATE INDEX took ${(performance.now() - start).toFixed(0)} ms`);
      }
      for (const [label, key] of Object.entries(probes)) {
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS) ${sql}`, [key, records + 1]);
        const plan = rows.map((row: Record<string, string>) => row['QUERY PLAN']);
        console.log(`postgres ${indexed ? 'with' : 'without'} index, ${label}:\n    ${plan.join('\n    ')}`);
        const ms = await time(() => client.query(sql, [key, records + 1]));
        console.log(`  ${label}: median ${ms.toFixed(3)} ms`);
      }
    }
  } finally {
    await client.end();
    await database.drop();
  }
}

/**
 * What the index costs the write path: single-key PUTs through SqliteStore.commit on a
 * filled log (sync normal, so the figure is CPU and page cache, not fsync), random keys,
 * in groups of 16 as group commit forms them under load; alternated without and with.
 */
async function sqliteWrites(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'history-writes-'));
  try {
    const path = join(dir, 'statelog.db');
    fillLog(path, { records, keys });
    const request = (key: string, value: string): WriteRequest => ({
      ops: [{ op: 'set', key, value }],
    });
    const results: Record<string, number[]> = { without: [], with: [] };
    let n = 0;
    for (let round = 0; round < 6; round++) {
      const indexed = round % 2 === 1;
      const db = new Database(path);
      db.exec(indexed ? 'CREATE INDEX IF NOT EXISTS log_key_seq ON log (key, seq)' : 'DROP INDEX IF EXISTS log_key_seq');
      db.close();
      const store = new SqliteStore({ path, sync: 'normal', idempotencyTtlMs: 60_000 });
      const writes = 40_000;
      const start = performance.now();
      for (let i = 0; i < writes; i += 16) {
        const group: WriteRequest[] = [];
        for (let j = 0; j < 16; j++) group.push(request(keyName(Math.floor(Math.random() * keys)), `{"w":${++n}}`));
        await store.commit(group, Date.now());
      }
      results[indexed ? 'with' : 'without']!.push(((performance.now() - start) * 1000) / writes);
      await store.close();
    }
    for (const [label, samples] of Object.entries(results)) {
      console.log(`sqlite store commit ${label} index: µs a write ${samples.map((v) => v.toFixed(1)).join(', ')} (median ${median(samples).toFixed(1)})`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const only = process.env.ONLY;
if (!only || only === 'sqlite') await sqlite();
if (!only || only === 'writes') await sqliteWrites();
if (!only || only === 'postgres') await postgres();
