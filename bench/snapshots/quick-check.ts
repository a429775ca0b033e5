// What the start-up integrity check costs (npm run bench:quick-check): PRAGMA quick_check
// on a SQLite file of KEYS live keys of about 1 KB (default 200,000: some 280 MB), read
// twice, the second time from the page cache. Not a figure of the suite: a measurement
// for the README's operations notes.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { seedLiveKeys } from '../../harness/seed-db.js';
import { envNumber } from '../shared/lib.js';

const keys = envNumber('KEYS', 200_000);
const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-'));
try {
  const path = join(dir, 'check.db');
  seedLiveKeys(path, { count: keys, value: (i) => JSON.stringify({ n: i, pad: 'x'.repeat(1000) }) });
  const megabytes = Math.round(statSync(path).size / 1e6);
  for (const read of ['first', 'second']) {
    const db = new Database(path, { readonly: true });
    const started = performance.now();
    const [row] = db.pragma('quick_check') as { quick_check: string }[];
    console.log(`${read} read: quick_check of ${megabytes} MB (${keys} keys): ${Math.round(performance.now() - started)} ms, ${row!.quick_check}`);
    db.close();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
