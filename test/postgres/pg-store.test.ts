// The PostgreSQL store on its own: migrations under the advisory lock, the head watch
// (NOTIFY and catch-up), snapshots through a cursor, idempotency purge, and compaction
// on one node at a time.
import { copyFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { PgStore } from '../../src/store/postgres/store.js';
import { PG_MIGRATIONS_DIR } from '../../src/store/postgres/migrations.js';
import { MigrationError } from '../../src/store/migration-files.js';
import { prefixUpperBound } from '../../src/store/postgres/sql.js';
import type { CompactionPass, StoredEntry } from '../../src/store/log-store.js';
import { tempDir } from '../support/helpers.js';
import { createTestDatabase, schemaTemplate } from '../../harness/pg-database.js';
import { allRecords, outcomeOf, write } from '../support/store-helpers.js';
import { fixture, sleep, type Fixture } from './fixtures.js';

let f: Fixture | undefined;
let dir: string | undefined;
afterEach(async () => {
  await f?.cleanup();
  f = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

const set = (key: string, value: unknown) => ({ op: 'set' as const, key, value: JSON.stringify(value) });
const del = (key: string) => ({ op: 'delete' as const, key });

async function runToEnd(pass: CompactionPass): Promise<number> {
  while (await pass.step()) await new Promise((resolve) => setImmediate(resolve));
  return Date.now();
}

async function readAll(store: PgStore, prefix = '', pageSize = 7) {
  const snapshot = await store.openSnapshot(prefix);
  try {
    const entries = [];
    for (let page = await snapshot.nextPage(pageSize); page.length > 0; page = await snapshot.nextPage(pageSize)) entries.push(...page);
    return { offset: snapshot.offset, entries };
  } finally {
    snapshot.close();
  }
}

describe('prefixUpperBound', () => {
  it('raises the last code point, skipping surrogates and carrying past U+10FFFF', () => {
    expect(prefixUpperBound('')).toBeNull();
    expect(prefixUpperBound('user/')).toBe('user0');
    expect(prefixUpperBound('a\ud7ff')).toBe('a\ue000');
    expect(prefixUpperBound('a\u{10ffff}')).toBe('b');
    expect(prefixUpperBound('\u{10ffff}\u{10ffff}')).toBeNull();
    expect(prefixUpperBound('é')).toBe('ê');
  });
});

describe('migrations', () => {
  it('apply once when several nodes start together', async () => {
    f = await fixture({ empty: true });
    await Promise.all([f.open(), f.open(), f.open()]);
    const client = await f.connect();
    const { rows } = await client.query('SELECT version, name FROM schema_migrations');
    expect(rows).toEqual([
      { version: 1, name: '001_log.sql' },
      { version: 2, name: '002_append.sql' },
      { version: 3, name: '003_ttl_digest.sql' },
      { version: 4, name: '004_expiry_index.sql' },
      { version: 5, name: '005_consumers.sql' },
      { version: 6, name: '006_lineage.sql' },
      { version: 7, name: '007_durable_head.sql' },
    ]);
    const epochs = await client.query('SELECT epoch FROM meta');
    expect(epochs.rows).toHaveLength(1);
    expect(epochs.rows[0].epoch).toMatch(/^[0-9a-f]{32}$/);
  });

  it('fail loudly, leaving the failed file without a trace', async () => {
    f = await fixture({ empty: true });
    dir = tempDir();
    copyFileSync(join(PG_MIGRATIONS_DIR, '001_log.sql'), join(dir, '001_log.sql'));
    writeFileSync(join(dir, '002_broken.sql'), 'CREATE TABLE half_done (x int); ALTER TABLE no_such_table ADD COLUMN x int;');
    await expect(f.open({ migrationsDir: dir })).rejects.toThrow(MigrationError);
    await expect(f.open({ migrationsDir: dir })).rejects.toThrow(/002_broken\.sql.*no_such_table/);
    const client = await f.connect();
    expect((await client.query('SELECT version FROM schema_migrations')).rows).toEqual([{ version: 1 }]);
    expect((await client.query("SELECT to_regclass('half_done') AS t")).rows).toEqual([{ t: null }]);
  });

  it('refuse a database whose encoding is not UTF8', async () => {
    f = await fixture();
    const client = await f.connect();
    const name = `${f.db.name}_ascii`;
    await client.query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'`);
    try {
      const url = f.db.url.replace(f.db.name, name);
      await expect(
        PgStore.open({ url, poolSize: 1, snapshotPoolSize: 1, sync: 'full', idempotencyTtlMs: 1000 }),
      ).rejects.toThrow(/encoding is SQL_ASCII/);
    } finally {
      await client.query(`DROP DATABASE ${name} WITH (FORCE)`);
    }
  });
});

describe('the head watch', () => {
  it("tells a node of another node's commit through NOTIFY, well before the catch-up read", async () => {
    f = await fixture();
    const a = await f.open();
    const b = await f.open({ catchUpMs: 60_000 });
    const heads: number[] = [];
    b.watchHead((head) => heads.push(head));
    const started = Date.now();
    await write(a, [set('k', 1), set('j', 2)]);
    while (heads.length === 0 && Date.now() - started < 5000) await sleep(5);
    expect(heads).toEqual([2]);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(b.position().head).toBe(2);
  });

  it('learns commits through the catch-up read while the listening connection is down', async () => {
    f = await fixture();
    const a = await f.open();
    const b = await f.open({ catchUpMs: 200 });
    const errors: Error[] = [];
    const heads: number[] = [];
    b.watchHead(
      (head) => heads.push(head),
      (err) => errors.push(err),
    );
    const admin = await f.connect();
    // Cut every listening connection of the database, as a network fault would.
    await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'");
    await write(a, [set('k', 1)]);
    const started = Date.now();
    while (!heads.includes(1) && Date.now() - started < 5000) await sleep(10);
    expect(heads).toContain(1);
    expect(errors.length).toBeGreaterThan(0);
    // And it listens again: a later commit arrives by notification.
    await sleep(1500);
    const listening = await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'");
    expect(listening.rows[0].n).toBe(2);
  });

  it('does not call the watchers for its own commits', async () => {
    f = await fixture();
    const a = await f.open();
    const heads: number[] = [];
    a.watchHead((head) => heads.push(head));
    await write(a, [set('k', 1)]);
    await sleep(300);
    expect(heads).toEqual([]);
    expect(a.position().head).toBe(1);
  });
});

describe('snapshots', () => {
  it('read the state at exactly their offset while writes go on, page by page', async () => {
    f = await fixture();
    const store = await f.open();
    for (let i = 0; i < 30; i++) await write(store, [set(`k${String(i).padStart(2, '0')}`, i)]);
    await write(store, [del('k03')]);
    const snapshot = await store.openSnapshot('');
    expect(snapshot.offset).toBe(31);
    // Writes commit while the snapshot is open: it blocks none of them and sees none.
    await write(store, [set('k00', 'changed'), del('k01'), set('new', true)]);
    const seen = [];
    for (let page = await snapshot.nextPage(4); page.length > 0; page = await snapshot.nextPage(4)) {
      expect(page.length).toBeLessThanOrEqual(4);
      seen.push(...page);
    }
    snapshot.close();
    expect(seen.map((e) => e.key)).toEqual(Array.from({ length: 30 }, (_, i) => `k${String(i).padStart(2, '0')}`).filter((k) => k !== 'k03'));
    expect(seen[0]).toEqual({ key: 'k00', value: '0', offset: 1, ts: expect.any(Number) });
    await expect(snapshot.nextPage(4)).rejects.toThrow(/closed/);
    expect((await readAll(store, 'k0')).entries.map((e) => e.value)).toEqual(['"changed"', '2', '4', '5', '6', '7', '8', '9']);
  });

  it('hold one connection in one transaction, given back at close', async () => {
    f = await fixture();
    const store = await f.open();
    await write(store, [set('a', 1)]);
    const admin = await f.connect();
    const open = async () =>
      (
        await admin.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
        )
      ).rows[0].n;
    const snapshot = await store.openSnapshot('');
    expect(await open()).toBe(1);
    snapshot.close();
    const started = Date.now();
    while ((await open()) > 0 && Date.now() - started < 2000) await sleep(10);
    expect(await open()).toBe(0);
  });

  it('stay exact while another node compacts the log under them', async () => {
    f = await fixture();
    const a = await f.open();
    const b = await f.open();
    for (let round = 0; round < 5; round++) await write(a, Array.from({ length: 20 }, (_, i) => set(`k${i}`, round)));
    const before = await readAll(a);
    const snapshot = await a.openSnapshot('');
    const pass = await b.startCompaction({ now: Date.now() + 1000, minLagMs: 0, tombstoneRetentionMs: 0 }, { maxRows: 1000, maxMs: 50 });
    await runToEnd(pass);
    expect(pass.removed).toBe(80);
    const seen = [];
    for (let page = await snapshot.nextPage(6); page.length > 0; page = await snapshot.nextPage(6)) seen.push(...page);
    snapshot.close();
    expect(seen).toEqual(before.entries);
  });
});

describe('group commit on PostgreSQL', () => {
  it('plans from an unlocked read, plans again when a key it read changed (under the lock after three tries), losing no increment', async () => {
    f = await fixture();
    const a = await f.open();
    const b = await f.open();
    const incr = { op: 'incr' as const, key: 'n', by: 1 };
    await Promise.all(
      [a, b].map(async (store) => {
        for (let i = 0; i < 100; i++) expect((await write(store, [incr, set(`other${i}`, i)])).ok).toBe(true);
      }),
    );
    expect((await a.get('n'))?.value).toBe('200');
    expect(a.planConflicts + b.planConflicts).toBeGreaterThan(0);
    expect(await a.counters()).toMatchObject({ head: 400, records: 400, liveKeys: 101, tombstones: 0 });
    const offsets = (await allRecords(a)).map((r) => r.offset);
    expect(offsets).toEqual(Array.from({ length: 400 }, (_, i) => i + 1));
  });

  it("decides a condition on an offset that the group itself assigns as it would under the lock", async () => {
    f = await fixture();
    const store = await f.open();
    for (let i = 0; i < 5; i++) await write(store, [set(`before${i}`, i)]);
    // One group: k is set at offset 6, then a request asks for k at offset 1 (refused:
    // k is at 6) and another for k at offset 6 (applied at 7). Planned before the head is
    // known, the group's own offsets would start at 1.
    const request = (ops: Parameters<typeof write>[1]) => ({ ops });
    const results = await store.commit(
      [
        request([set('k', 'first')]),
        request([{ ...set('k', 'at 1'), ifOffset: 1 }]),
        request([{ ...set('k', 'at 6'), ifOffset: 6 }]),
        request([set('j', 'batch'), { ...set('j', 'batch again'), ifOffset: 1 }]),
      ],
      Date.now(),
    );
    expect(results.map(outcomeOf)).toEqual([
      { ok: true, applied: [{ key: 'k', offset: 6 }] },
      { ok: false, failure: { code: 'precondition_failed', index: 0, currentOffset: 6 } },
      { ok: true, applied: [{ key: 'k', offset: 7 }] },
      { ok: false, failure: { code: 'precondition_failed', index: 1, currentOffset: 8 } },
    ]);
    // Nothing but the applied requests was written.
    expect((await allRecords(store)).slice(5).map((r) => [r.offset, r.key, r.value])).toEqual([
      [6, 'k', '"first"'],
      [7, 'k', '"at 6"'],
    ]);
    expect(await store.counters()).toMatchObject({ head: 7, records: 7 });
  });
});

describe('bounded pages (maxChars and full)', () => {
  it('end a changes page at limit or at the size bound, at least one record, and say it is full', async () => {
    f = await fixture();
    const store = await f.open();
    const big = 'x'.repeat(1000);
    await write(store, [set('a', big), set('b', big), set('c', big), set('d', 1)]);
    const read = (limit: number, maxChars?: number) => store.readChanges({ after: 0, prefix: '', limit, ...(maxChars ? { maxChars } : {}) });
    const bySize = await read(100, 2000);
    expect(bySize.records.map((r) => r.key)).toEqual(['a', 'b']);
    expect(bySize.full).toBe(true);
    expect((await read(100, 10)).records.map((r) => r.key)).toEqual(['a']);
    const byLimit = await read(2);
    expect([byLimit.records.length, byLimit.full]).toEqual([2, true]);
    const all = await read(100, 1_000_000);
    expect([all.records.length, all.full, all.head]).toEqual([4, false, 4]);
    const empty = await store.readChanges({ after: 4, prefix: '', limit: 10, maxChars: 10 });
    expect([empty.records, empty.full, empty.head]).toEqual([[], false, 4]);
  });

  it('end a listing page at the size bound, at least one key, and say it was cut', async () => {
    f = await fixture();
    const store = await f.open();
    const big = 'x'.repeat(1000);
    await write(store, [set('a', big), set('b', big), set('c', big), set('d', 1)]);
    const list = (limit: number, maxChars?: number, afterKey: string | null = null) =>
      store.list({ prefix: '', afterKey, limit, ...(maxChars ? { maxChars } : {}) });
    const keys = (page: { items: { key: string }[]; truncated?: boolean }) => [page.items.map((e) => e.key), page.truncated ?? false];
    expect(keys(await list(100, 2000))).toEqual([['a', 'b'], true]);
    expect(keys(await list(100, 10))).toEqual([['a'], true]);
    expect(keys(await list(100, 2000, 'b'))).toEqual([['c', 'd'], false]);
    expect(keys(await list(100))).toEqual([['a', 'b', 'c', 'd'], false]);
    expect(keys(await list(2, 1_000_000))).toEqual([['a', 'b'], false]);
    expect((await list(100, 10, 'd')).items).toEqual([]);
  });

  it('end a snapshot page at the size bound without losing a key', async () => {
    f = await fixture();
    const store = await f.open();
    const big = 'y'.repeat(1000);
    await write(store, Array.from({ length: 40 }, (_, i) => set(`k${String(i).padStart(2, '0')}`, i % 10 === 0 ? big : i)));
    const snapshot = await store.openSnapshot('');
    const pages: StoredEntry[][] = [];
    for (let page = await snapshot.nextPage(100, 1500); page.length > 0; page = await snapshot.nextPage(100, 1500)) pages.push(page);
    snapshot.close();
    expect(pages.flat().map((e) => e.key)).toEqual(Array.from({ length: 40 }, (_, i) => `k${String(i).padStart(2, '0')}`));
    expect(pages.length).toBeGreaterThan(1);
    // Only a page's last key may take it past the bound.
    const size = (entries: StoredEntry[]) => entries.reduce((sum, e) => sum + e.key.length + e.value.length, 0);
    for (const page of pages) expect(size(page.slice(0, -1))).toBeLessThan(1500);
    for (const page of pages.slice(0, -1)) expect(size(page)).toBeGreaterThanOrEqual(1500);
  });
});

describe('session settings', () => {
  it('end a stalled write transaction, keep snapshots, and follow STATELOG_SYNC', async () => {
    f = await fixture();
    const store = await f.open({ sync: 'normal' });
    // The pools are private: their sessions' settings are what is checked here.
    const { pool, snapshotPool } = store as unknown as Record<'pool' | 'snapshotPool', pg.Pool>;
    const show = async (target: pg.Pool, name: string) => (await target.query(`SHOW ${name}`)).rows[0][name];
    expect(await show(pool, 'idle_in_transaction_session_timeout')).toBe('10s');
    expect(await show(snapshotPool, 'idle_in_transaction_session_timeout')).toBe('0');
    expect(await show(pool, 'synchronous_commit')).toBe('off');
    expect(await show(pool, 'tcp_keepalives_idle')).toBe('10');
    const full = await f.open({ sync: 'full' });
    expect(await show((full as unknown as { pool: pg.Pool }).pool, 'synchronous_commit')).toBe('on');
  });
});

describe('idempotency purge', () => {
  it('forgets expired answers only', async () => {
    f = await fixture();
    const store = await f.open({ idempotencyTtlMs: 1000 });
    const request = (key: string) => ({
      ops: [set(key, 1)],
      idempotency: { key, fingerprint: 'f' },
    });
    await store.commit([request('old-1'), request('old-2')], 10_000);
    await store.commit([request('fresh')], 20_000);
    expect(await store.purgeIdempotency(15_000)).toBe(2);
    expect(await store.purgeIdempotency(15_000)).toBe(0);
    const [replay] = await store.commit([request('fresh')], 20_500);
    expect(replay!.replayed).toBe(true);
  });
});

describe('compaction', () => {
  it('keeps the latest record of each key and removes expired delete markers, raising the horizon', async () => {
    f = await fixture();
    const store = await f.open();
    await write(store, [set('a', 1), set('a', 2), set('b', 1), set('c', 1), set('a', 3)]);
    await write(store, [del('c')]);
    await write(store, [set('b', 2)]);
    const pass = await store.startCompaction({ now: Date.now() + 1000, minLagMs: 0, tombstoneRetentionMs: 0 }, { maxRows: 2, maxMs: 1 });
    await runToEnd(pass);
    expect({ removed: pass.removed, tombstonesRemoved: pass.tombstonesRemoved }).toEqual({ removed: 5, tombstonesRemoved: 1 });
    expect((await allRecords(store)).map((r) => [r.offset, r.key, r.value])).toEqual([
      [5, 'a', '3'],
      [7, 'b', '2'],
    ]);
    expect(await store.counters()).toMatchObject({ head: 7, horizon: 6, records: 2, liveKeys: 2, tombstones: 0 });
    expect(await store.compactionBacklog()).toEqual({ records: 2, superseded: 0, supersededSince: null });
    // Offsets go on from the head, never reused.
    expect((await write(store, [set('c', 'again')])).ok && (await store.get('c'))?.offset).toBe(8);
  });

  it('keeps delete markers younger than the retention, and one record older than the minimum lag', async () => {
    f = await fixture();
    const store = await f.open();
    await write(store, [set('a', 1)], 1000);
    await write(store, [set('a', 2), del('a'), set('b', 1)], 2000);
    await write(store, [set('b', 2)], 3000);
    expect(await store.compactionBacklog()).toEqual({ records: 5, superseded: 3, supersededSince: 2000 });
    // Cutoff at t = 2500: offsets 1..4. b's latest (5) is younger, so b keeps offset 4.
    const pass = await store.startCompaction({ now: 3500, minLagMs: 1000, tombstoneRetentionMs: 100_000 }, { maxRows: 100, maxMs: 50 });
    await runToEnd(pass);
    expect((await allRecords(store)).map((r) => r.offset)).toEqual([3, 4, 5]);
    expect(await store.counters()).toMatchObject({ horizon: 0, records: 3, liveKeys: 1, tombstones: 1 });
    expect(await store.compactionBacklog()).toEqual({ records: 3, superseded: 1, supersededSince: 3000 });
  });

  it('runs on one node at a time: started on two at once, it runs once and both answer when it is done', async () => {
    f = await fixture();
    const a = await f.open();
    const b = await f.open();
    for (let round = 0; round < 40; round++) await write(a, Array.from({ length: 250 }, (_, i) => set(`k${i}`, round)));
    const policy = { now: Date.now() + 1000, minLagMs: 0, tombstoneRetentionMs: 0 };
    const budget = { maxRows: 500, maxMs: 2 };
    const [pa, pb] = await Promise.all([a.startCompaction(policy, budget), b.startCompaction(policy, budget)]);

    // Writes keep flowing on both nodes during the run.
    let writing = true;
    const writes = (async () => {
      for (let i = 0; writing; i++) await write(i % 2 ? a : b, [set(`live${i % 10}`, i)]);
    })();
    const ends = await Promise.all([runToEnd(pa), runToEnd(pb)]);
    writing = false;
    await writes;

    // One ran; the other found its run in progress, removed nothing and ended after it.
    const [runner, joiner] = pa.removed > 0 ? [0, 1] : [1, 0];
    expect([pa, pb][runner]!.removed).toBe(10_000 - 250);
    expect([pa, pb][joiner]!.removed).toBe(0);
    expect(ends[joiner]).toBeGreaterThanOrEqual(ends[runner]!);
    const admin = await f.connect();
    const dupes = await admin.query("SELECT key FROM log WHERE key LIKE 'k%' GROUP BY key HAVING count(*) > 1");
    expect(dupes.rows).toEqual([]);
    const counted = await admin.query('SELECT (SELECT count(*)::int FROM log) AS records, (SELECT count(*)::int FROM state) AS keys');
    const counters = await a.counters();
    expect(counters.records).toBe(counted.rows[0].records);
    expect(counters.liveKeys + counters.tombstones).toBe(counted.rows[0].keys);
    // The lock is free again: the next run on either node takes it, and removes what it finds.
    await write(a, [set('k0', 'again')]);
    const next = await b.startCompaction(policy, budget);
    await runToEnd(next);
    expect(next.removed).toBeGreaterThan(0);
  });

  it('gives the lock back when the store closes during a run', async () => {
    f = await fixture();
    const a = await f.open();
    const b = await f.open();
    for (let round = 0; round < 4; round++) await write(a, Array.from({ length: 100 }, (_, i) => set(`k${i}`, round)));
    const pass = await a.startCompaction({ now: Date.now() + 1000, minLagMs: 0, tombstoneRetentionMs: 0 }, { maxRows: 50, maxMs: 1 });
    expect(await pass.step()).toBe(true);
    await a.close();
    const next = await b.startCompaction({ now: Date.now() + 1000, minLagMs: 0, tombstoneRetentionMs: 0 }, { maxRows: 1000, maxMs: 50 });
    await runToEnd(next);
    // It ran (a run that joins another removes nothing).
    expect(next.removed).toBeGreaterThan(0);
    expect((await b.counters()).records).toBe(100);
  });
});

describe('test databases', () => {
  it('are dropped when done', async () => {
    const db = await createTestDatabase();
    await db.drop();
    f = await fixture();
    const client = await f.connect();
    const { rows } = await client.query('SELECT count(*)::int AS n FROM pg_database WHERE datname = $1', [db.name]);
    expect(rows[0].n).toBe(0);
  });
  it('cloned from the migrated template are migrated, each with an epoch and a lineage of its own', async () => {
    const template = await schemaTemplate();
    expect(process.env.STATELOG_TEST_PG_TEMPLATE).toBe(template);
    const dbs = [await createTestDatabase(), await createTestDatabase()];
    try {
      const identities = [];
      for (const db of dbs) {
        const client = new pg.Client({ connectionString: db.url });
        await client.connect();
        try {
          const versions = await client.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version');
          expect(versions.rows.map((r) => r.version)).toEqual([1, 2, 3, 4, 5, 6, 7]);
          identities.push((await client.query<{ epoch: string; lineage: string }>('SELECT epoch, lineage FROM meta')).rows[0]!);
        } finally {
          await client.end();
        }
      }
      expect(identities[0]!.epoch).toMatch(/^[0-9a-f]{32}$/);
      expect(identities[0]!.lineage).toMatch(/^1-[0-9a-f]{8}:1$/);
      expect(identities[1]!.epoch).not.toBe(identities[0]!.epoch);
      expect(identities[1]!.lineage).not.toBe(identities[0]!.lineage);
    } finally {
      for (const db of dbs) await db.drop();
    }
  });
});
