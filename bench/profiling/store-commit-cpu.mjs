// CPU time a record of SqliteStore.commit (the write rules, the digest and the SQLite
// statements of a group; no HTTP), for compiled builds alternated in one process: groups
// of 5 batches of 100 sets of random keys of 10,000 (with --put: groups of 10 PUTs of one
// set each), STATELOG_SYNC=normal.
//   node bench/profiling/store-commit-cpu.mjs [--put] .variant-base .variant-x ...   (builds from npx tsc -p tsconfig.json --outDir .variant-x)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const put = process.argv.includes('--put');
const builds = process.argv.slice(2).filter((arg) => arg !== '--put');
const [REQUESTS, OPS] = put ? [10, 1] : [5, 100];
const stores = [];
const dir = mkdtempSync(join(tmpdir(), 'storecpu-'));
for (const [i, b] of builds.entries()) {
  const { SqliteStore } = await import(new URL(`../../${b}/store/sqlite/store.js`, import.meta.url).href);
  stores.push(new SqliteStore({ path: join(dir, `s${i}.db`), sync: 'normal', idempotencyTtlMs: 60000 }));
}
const render = (o) => ({ status: 200, headers: {}, body: o.ok ? '{}' : '{"e":1}' });
const value = () => `{"balance":${Math.floor(Math.random() * 1e6)},"currency":"EUR"}`;
const group = () => Array.from({ length: REQUESTS }, () => ({ render, ops: Array.from({ length: OPS }, () => ({ op: 'set', key: `user_${Math.floor(Math.random() * 10000)}`, value: value() })) }));
const groups = Array.from({ length: put ? 10_000 : 200 }, group);
for (const s of stores) for (const g of groups) await s.commit(g, Date.now());
const results = builds.map(() => []);
for (let round = 0; round < 10; round++) {
  for (let j = 0; j < stores.length; j++) {
    const i = (j + round) % stores.length;
    const c0 = process.cpuUsage();
    for (const g of groups) await stores[i].commit(g, Date.now());
    const c = process.cpuUsage(c0);
    results[i].push((c.user + c.system) / (groups.length * REQUESTS * OPS));
  }
}
const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
builds.forEach((b, i) => console.log(b.padEnd(28), med(results[i]).toFixed(2), 'µs CPU a record (median of 10)', 'ratio', med(results[i].map((v, r) => v / results[0][r])).toFixed(3)));
for (const s of stores) await s.close();
rmSync(dir, { recursive: true, force: true });
