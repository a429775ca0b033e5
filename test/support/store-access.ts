// The database of the store under test (STATELOG_TEST_STORE), with direct access for the
// tests that need what no HTTP request or LogStore method gives: a store of their own on
// the same database, counts straight from the tables, the horizon set by hand, records
// removed as the compactor would, failures of the database itself, and large logs
// filled by SQL. One interface with one implementation per store, so that the tests
// hold no SQL and run on both.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { Config } from '../../src/config.js';
import type { LogStore } from '../../src/store/log-store.js';
import { openStore, type StoreHooks } from '../../src/store/open-store.js';
import { migratePostgres } from '../../src/store/postgres/migrations.js';
import { pgTypes } from '../../src/store/postgres/sql.js';
import { PgStore } from '../../src/store/postgres/store.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { fillLog, planFill, type FillOptions } from '../../harness/fill-log.js';
import { seedEntry, seedLiveKeys, type SeedOptions } from '../../harness/seed-db.js';
import { createTestDatabase } from '../../harness/pg-database.js';

export type StoreKind = 'sqlite' | 'postgres';

/** The store the tests run against. */
export const TEST_STORE: StoreKind = process.env.STATELOG_TEST_STORE === 'postgres' ? 'postgres' : 'sqlite';

export interface TableCounts {
  records: number;
  liveKeys: number;
  tombstones: number;
  superseded: number;
}

/** Undoes an injected failure. */
export type Restore = () => Promise<void>;

export interface TestStore {
  readonly kind: StoreKind;
  /** The settings that put a server (in this process or a child) on this database. */
  readonly env: Record<string, string>;
  /** A store of the test's own on this database (closed by drop() if still open). */
  openStore(): Promise<LogStore>;
  /**
   * Opens the store that serves this database in this process (the app's: buildApp's
   * openStore), as the app would; it is told when the horizon is moved.
   */
  openAppStore(config: Config, hooks?: StoreHooks): Promise<LogStore>;
  /** What the counters must be, counted from the tables themselves. */
  counted(): Promise<TableCounts>;
  /** The meta row as stored. */
  meta(): Promise<{ head: number; horizon: number; records: number }>;
  /** Moves the horizon as a compactor that removed a delete marker at `horizon` would. */
  setHorizon(horizon: number): Promise<void>;
  /** Offsets of the records that a later record of their key superseded, ascending. */
  supersededOffsets(): Promise<number[]>;
  /** Removes records from the log as the compactor would, leaving the counters alone. */
  removeRecords(offsets: number[]): Promise<void>;
  /** Removals from the log fail with `message` (only that of `atOffset`, if given). */
  failCompaction(message: string, atOffset?: number): Promise<Restore>;
  /** Appends to the log fail: a real error of the database on the write path. */
  failWrites(): Promise<Restore>;
  /** Reads of the current state fail: a real error of the database (its table is gone). */
  failReads(): Promise<Restore>;
  /**
   * The app's store loses its database for good: its SQLite connection is closed, or its
   * PostgreSQL sessions are ended and no new one is let in.
   */
  cutOff(): Promise<void>;
  /**
   * Whether a read transaction (a snapshot) holds the database at an old state: on
   * SQLite, a checkpoint cannot copy back the newest write (write once after it began);
   * on PostgreSQL, a statelog session is in a transaction (a snapshot's lasts; any other
   * is a moment's query).
   */
  readTransactionOpen(): Promise<boolean>;
  /** Fills the empty database with planFill's log; returns the live keys' values. */
  fillLog(options: FillOptions): Promise<Map<string, string>>;
  /** Fills the empty database with `count` live keys. */
  seedLiveKeys(options: SeedOptions): Promise<void>;
  /** Empties the database as new, for the next run of a property; close its stores first. */
  reset(): Promise<void>;
  /** Closes what it opened and drops a PostgreSQL database (the caller removes `dir`). */
  drop(): Promise<void>;
}

export interface TestStoreOptions {
  /**
   * A PostgreSQL database with no schema yet, for a test of what happens before or during
   * the migrations (others are cloned already migrated). A SQLite file is always new.
   */
  empty?: boolean;
}

/** A fresh database of the store under test: a file in `dir`, or a new PostgreSQL database. */
export async function testStore(
  dir: string,
  file = 'statelog.db',
  kind: StoreKind = TEST_STORE,
  options: TestStoreOptions = {},
): Promise<TestStore> {
  return kind === 'sqlite' ? sqliteTestStore(join(dir, file)) : postgresTestStore(options);
}

/** A SQLite store on `path`, as the compaction tests open it. */
export function openSqliteStore(path: string): SqliteStore {
  return new SqliteStore({ path, sync: 'normal', idempotencyTtlMs: 60_000 });
}

/** Counts that both stores answer with the same SQL (SQLite's live is 0 or 1). */
const COUNTS_SQL = `SELECT
  (SELECT count(*) FROM log) AS records,
  (SELECT count(*) FROM state WHERE live) AS "liveKeys",
  (SELECT count(*) FROM state WHERE NOT live) AS tombstones,
  (SELECT count(*) FROM log l WHERE NOT EXISTS (SELECT 1 FROM state s WHERE s.key = l.key AND s.seq = l.seq)) AS superseded`;
const META_SQL = 'SELECT head, horizon, records FROM meta WHERE id = 1';
const SUPERSEDED_SQL = 'SELECT l.seq FROM log l JOIN state s ON s.key = l.key WHERE l.seq < s.seq ORDER BY l.seq';
const FAIL_COMPACTION = 'statelog_test_fail_compaction';
const FAIL_WRITES = 'statelog_test_fail_writes';

/** A string as an SQL literal. */
const literal = (text: string): string => `'${text.replaceAll("'", "''")}'`;

/**
 * A store that can be closed and opened again behind the same object, so that whoever
 * holds it (the app's services) reads afresh what a test changed in the database.
 */
async function reopenable(open: () => Promise<LogStore>): Promise<{ store: LogStore; reopen(): Promise<void> }> {
  let current = await open();
  const store = new Proxy(current, {
    get: (_target, property) => Reflect.get(current, property),
    set: (_target, property, value) => Reflect.set(current, property, value),
    getPrototypeOf: () => Object.getPrototypeOf(current),
  });
  return {
    store,
    async reopen() {
      await current.close();
      current = await open();
    },
  };
}

function sqliteTestStore(path: string): TestStore {
  const stores: SqliteStore[] = [];
  let attached: { store: LogStore; reopen(): Promise<void> } | undefined;
  let connection: Database.Database | undefined;
  const db = () => {
    if (!connection) {
      connection = new Database(path);
      connection.pragma('busy_timeout = 5000');
    }
    return connection;
  };
  const close = async () => {
    await Promise.all(stores.map((store) => store.close()));
    connection?.close();
    connection = undefined;
  };
  /** A trigger that aborts `event` on the log; dropped by the returned function. */
  const failOn = async (name: string, event: string, message: string, when = ''): Promise<Restore> => {
    db().exec(`CREATE TRIGGER ${name} BEFORE ${event} ON log ${when} BEGIN SELECT RAISE(ABORT, ${literal(message)}); END`);
    return async () => void db().exec(`DROP TRIGGER ${name}`);
  };
  return {
    kind: 'sqlite',
    env: { STATELOG_DB: path },
    async openStore() {
      const store = openSqliteStore(path);
      stores.push(store);
      return store;
    },
    async openAppStore(config, hooks) {
      attached = await reopenable(() => openStore(config, hooks));
      return attached.store;
    },
    async counted() {
      return db().prepare(COUNTS_SQL).get() as TableCounts;
    },
    async meta() {
      return db().prepare(META_SQL).get() as { head: number; horizon: number; records: number };
    },
    async setHorizon(horizon) {
      db().prepare('UPDATE meta SET horizon = ? WHERE id = 1').run(horizon);
      // The store keeps the meta row in memory: it reads it again when opened.
      await attached?.reopen();
    },
    async supersededOffsets() {
      return db().prepare(SUPERSEDED_SQL).pluck().all() as number[];
    },
    async removeRecords(offsets) {
      const remove = db().prepare('DELETE FROM log WHERE seq = ?');
      db().transaction(() => offsets.forEach((seq) => remove.run(seq)))();
    },
    // A trigger made on another connection is seen by the store's connection (its
    // statements are prepared again after a change of the schema).
    failCompaction: (message, atOffset) =>
      failOn(FAIL_COMPACTION, 'DELETE', message, atOffset === undefined ? '' : `WHEN old.seq = ${atOffset}`),
    failWrites: () => failOn(FAIL_WRITES, 'INSERT', 'writes refused'),
    async failReads() {
      db().exec('ALTER TABLE state RENAME TO state_gone');
      return async () => void db().exec('ALTER TABLE state_gone RENAME TO state');
    },
    async cutOff() {
      if (!(attached?.store instanceof SqliteStore)) throw new Error('no SQLite store opened for the app');
      attached.store.db.close();
    },
    async readTransactionOpen() {
      const [row] = db().pragma('wal_checkpoint(PASSIVE)') as { log: number; checkpointed: number }[];
      return row!.log > row!.checkpointed;
    },
    async fillLog(options) {
      return fillLog(path, options);
    },
    async seedLiveKeys(options) {
      seedLiveKeys(path, options);
    },
    async reset() {
      await close();
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
    },
    drop: close,
  };
}

/** Rows per INSERT when filling PostgreSQL. */
const FILL_BATCH = 20_000;

async function postgresTestStore(options: TestStoreOptions): Promise<TestStore> {
  const database = await createTestDatabase(options);
  const stores: PgStore[] = [];
  let attached: LogStore | undefined;
  let connection: Promise<pg.Client> | undefined;
  const db = () => {
    connection ??= (async () => {
      const client = new pg.Client({ connectionString: database.url, types: pgTypes, application_name: 'statelog-test' });
      await client.connect();
      return client;
    })();
    return connection;
  };
  const query = async <Row extends pg.QueryResultRow>(sql: string, values?: unknown[]): Promise<Row[]> =>
    (await (await db()).query<Row>(sql, values)).rows;
  const closeStores = () => Promise.all(stores.map((store) => store.close()));
  /** The schema, as a store would make it at start-up (once). */
  let schema: Promise<unknown> | undefined;
  const migrated = async () => {
    schema ??= db().then((client) => migratePostgres(client));
    await schema;
  };
  /** Appends records and state rows in batches, and sets the counters as the store keeps them. */
  const fill = async (
    records: Iterable<{ seq: number; key: string; value: string | null; ts: number }>,
    state: { key: string; seq: number; live: boolean }[],
    meta: { head: number; lastTs: number; records: number; stateKeys: number; liveKeys: number },
  ) => {
    await migrated();
    await query('BEGIN');
    let batch: { seq: number; key: string; value: string | null; ts: number }[] = [];
    const flush = async () => {
      await query(
        `INSERT INTO log (seq, key, op, value, ts)
         SELECT seq, key, CASE WHEN value IS NULL THEN 'delete' ELSE 'set' END, value, ts
         FROM json_to_recordset($1::json) AS r(seq bigint, key text, value text, ts bigint)`,
        // One JSON text: far cheaper to build and to parse than text arrays of JSON values.
        [JSON.stringify(batch)],
      );
      batch = [];
    };
    for (const record of records) {
      batch.push(record);
      if (batch.length === FILL_BATCH) await flush();
    }
    if (batch.length > 0) await flush();
    for (let from = 0; from < state.length; from += FILL_BATCH) {
      const rows = state.slice(from, from + FILL_BATCH);
      await query('INSERT INTO state (key, seq, live) SELECT * FROM json_to_recordset($1::json) AS r(key text, seq bigint, live boolean)', [
        JSON.stringify(rows),
      ]);
    }
    // As the SQLite store does at start-up: the oldest record's time is a lower bound of
    // when the first superseded record was superseded.
    await query(
      `UPDATE meta SET head = $1, last_ts = $2, records = $3::bigint, state_keys = $4::bigint, live_keys = $5,
         superseded_since = CASE WHEN $3::bigint > $4::bigint THEN (SELECT ts FROM log ORDER BY seq LIMIT 1) END WHERE id = 1`,
      [meta.head, meta.lastTs, meta.records, meta.stateKeys, meta.liveKeys],
    );
    await query('COMMIT');
    await query('ANALYZE log, state');
  };
  const failOn = async (name: string, event: string, message: string, when = ''): Promise<Restore> => {
    await query(`CREATE OR REPLACE FUNCTION statelog_test_fail() RETURNS trigger LANGUAGE plpgsql
      AS $$ BEGIN RAISE EXCEPTION '%', TG_ARGV[0]; END $$`);
    await query(`CREATE TRIGGER ${name} BEFORE ${event} ON log FOR EACH ROW ${when} EXECUTE FUNCTION statelog_test_fail(${literal(message)})`);
    return async () => void (await query(`DROP TRIGGER ${name} ON log`));
  };
  return {
    kind: 'postgres',
    // A small pool: many test apps share the server's connection limit.
    env: { STATELOG_STORE: 'postgres', DATABASE_URL: database.url, STATELOG_PG_POOL_SIZE: '4' },
    async openStore() {
      const store = await PgStore.open({ url: database.url, poolSize: 4, snapshotPoolSize: 2, sync: 'normal', idempotencyTtlMs: 60_000 });
      stores.push(store);
      return store;
    },
    async openAppStore(config, hooks) {
      attached = await openStore(config, hooks);
      return attached;
    },
    async counted() {
      return (await query<TableCounts>(COUNTS_SQL))[0]!;
    },
    async meta() {
      return (await query<{ head: number; horizon: number; records: number }>(META_SQL))[0]!;
    },
    async setHorizon(horizon) {
      await query('UPDATE meta SET horizon = $1 WHERE id = 1', [horizon]);
      // A node learns the horizon from what it reads, as after another node's compaction.
      await attached?.counters();
    },
    async supersededOffsets() {
      return (await query<{ seq: number }>(SUPERSEDED_SQL)).map((row) => row.seq);
    },
    async removeRecords(offsets) {
      await query('DELETE FROM log WHERE seq = ANY($1::bigint[])', [offsets]);
    },
    failCompaction: (message, atOffset) =>
      failOn(FAIL_COMPACTION, 'DELETE', message, atOffset === undefined ? '' : `WHEN (old.seq = ${atOffset})`),
    failWrites: () => failOn(FAIL_WRITES, 'INSERT', 'writes refused'),
    async failReads() {
      await query('ALTER TABLE state RENAME TO state_gone');
      return async () => void (await query('ALTER TABLE state_gone RENAME TO state'));
    },
    cutOff: () => database.cutOff(),
    async readTransactionOpen() {
      const [row] = await query<{ open: boolean }>(
        `SELECT count(*) > 0 AS open FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'statelog' AND xact_start IS NOT NULL`,
      );
      return row!.open;
    },
    async fillLog(options) {
      const plan = planFill(options);
      await fill(plan.records(), plan.state, plan.meta);
      return plan.current;
    },
    async seedLiveKeys(options) {
      const entry = seedEntry(options);
      const ts = Date.now();
      const keys = Array.from({ length: options.count }, (_, i) => ({ seq: i + 1, ...entry(i + 1) }));
      const records = keys.map(({ seq, key, value }) => ({ seq, key, value, ts }));
      const state = keys.map(({ seq, key }) => ({ key, seq, live: true }));
      const count = options.count;
      await fill(records, state, { head: count, lastTs: ts, records: count, stateKeys: count, liveKeys: count });
    },
    async reset() {
      await closeStores();
      await migrated();
      await query(`TRUNCATE log, state, idempotency;
        UPDATE meta SET head = 0, horizon = 0, last_ts = 0, records = 0, state_keys = 0, live_keys = 0, superseded_since = NULL`);
    },
    async drop() {
      await closeStores();
      const client = connection;
      connection = undefined;
      await client?.then((c) => c.end()).catch(() => {});
      await database.drop();
    },
  };
}
