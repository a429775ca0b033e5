// What SQLite alone costs a PUT: CPU time of a group's transaction, as the store writes
// it (the records appended, each key's state row upserted in key order, the meta row),
// against the same transaction without the state upserts. Groups of 30 PUTs of random
// keys of 10,000, synchronous = NORMAL (no fsync), on the store's own schema and pragmas
// (from the compiled build: npm run build first); and the WAL frames (pages) a group
// writes. Not a figure of the suite: a measurement for docs/BENCHMARKS.md.
//   node bench/profiling/sqlite-commit-cpu.mjs
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate } from '../../dist/store/sqlite/migrations.js';
import { openDatabase } from '../../dist/store/sqlite/store.js';

const GROUP = 30;
const KEYS = 10_000;
const dir = mkdtempSync(join(tmpdir(), 'sqlite-commit-'));

function open(name, withState) {
  const db = openDatabase(join(dir, `${name}.db`));
  migrate(db);
  const append = db.prepare('INSERT INTO log (seq, key, op, value, ts) VALUES (?, ?, ?, ?, ?)');
  const setState = db.prepare(
    `INSERT INTO state (key, seq, live, expires_at) VALUES (?, ?, 1, NULL)
     ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, live = excluded.live, expires_at = excluded.expires_at`,
  );
  const saveMeta = db.prepare('UPDATE meta SET head = ?, digest = ? WHERE id = 1');
  db.transaction(() => {
    for (let i = 0; i < KEYS; i++) setState.run(`user_${i}`, 0);
  })();
  let seq = 0;
  const commit = db.transaction((keys) => {
    for (const key of keys) append.run(++seq, key, 'set', `{"balance":${seq % 1e6},"currency":"EUR"}`, Date.now());
    if (withState) for (const key of [...keys].sort()) setState.run(key, seq);
    saveMeta.run(seq, '0123456789abcdef');
  });
  return { db, commit };
}

const group = () => Array.from({ length: GROUP }, () => `user_${Math.floor(Math.random() * KEYS)}`);
const sides = { 'records, state rows and meta (as the store)': true, 'records and meta only': false };
const results = Object.fromEntries(Object.keys(sides).map((name) => [name, []]));
for (let round = 0; round < 5; round++) {
  for (const [name, withState] of Object.entries(sides)) {
    const { db, commit } = open(`${round}-${withState}`, withState);
    for (let i = 0; i < 500; i++) commit(group());
    const groups = Array.from({ length: 3000 }, group);
    const before = process.cpuUsage();
    for (const keys of groups) commit(keys);
    const used = process.cpuUsage(before);
    results[name].push((used.user + used.system) / (groups.length * GROUP));
    db.close();
  }
}
/** WAL frames a group: the WAL's growth over 200 groups, with automatic checkpoints off. */
function framesAGroup(withState) {
  const { db, commit } = open(`frames-${withState}`, withState);
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.pragma('wal_autocheckpoint = 0');
  for (let i = 0; i < 200; i++) commit(group());
  const bytes = statSync(join(dir, `frames-${withState}.db-wal`)).size;
  db.close();
  // A WAL is a 32-byte header, then a 24-byte header and a page (4096 bytes) a frame.
  return (bytes - 32) / (24 + 4096) / 200;
}

const median = (values) => [...values].sort((a, b) => a - b)[values.length >> 1];
for (const [name, values] of Object.entries(results)) {
  const frames = framesAGroup(sides[name]).toFixed(1);
  console.log(`${name.padEnd(44)} ${median(values).toFixed(2)} µs CPU a PUT (median of 5; ${Math.min(...values).toFixed(2)} – ${Math.max(...values).toFixed(2)}), ${frames} WAL frames a group`);
}
rmSync(dir, { recursive: true, force: true });
