// The embedded SQLite log store. One process owns the file and is its only writer: a group
// commits as one synchronous transaction on the event loop, fsynced after it (wal-syncer.ts).
import { statfsSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import { LRUCache } from 'lru-cache';
import type { SyncMode } from '../../config.js';
import { SqliteCheckpointer } from './checkpointer.js';
import {
  LOG_ROWS_A_STATEMENT,
  openStoreFile,
  prepareStatements,
  stateSource,
  type CachedEntry,
  runInStatements,
  STATE_ROWS_A_STATEMENT,
  type Statements,
} from './database.js';
import { EARLY_CHECKPOINTER_RECORDS, SqliteCompactionPass, type CompactionHost, type SupersessionListener } from './compaction.js';
import type { ProcessLock } from './process-lock.js';
import { SqliteSnapshot } from './snapshot.js';
import { SnapshotWorker } from './snapshot-worker.js';
import { WalSyncer, type Waiter } from './wal-syncer.js';
import { SqliteConsumers } from './consumers.js';
import { WriteRoom } from '../store-errors.js';
import { sqliteErrorKinds } from './errors.js';
import { DigestSum, digestHex, digestOf, type Term } from '../../contract/digest.js';
import { applyToDigest, liveAt, planWrites, type StateSource, type WritePlan } from '../write-plan.js';
import { liveEntriesParams, prefixUpperBound, takePage, toRecord } from './sql.js';
import type {
  ChangesPage,
  ChangesQuery,
  HistoryPage,
  HistoryQuery,
  ListPage,
  CompactionBacklog,
  CompactionBudget,
  CompactionPass,
  CompactionPolicy,
  DueExpiry,
  ListQuery,
  LogPosition,
  LogStore,
  SnapshotReader,
  StoreCounters,
  StoredEntry,
  WriteRequest,
  WriteResult,
} from '../log-store.js';
import { changesUntil, countersOf, HISTORY_SCAN_RECORDS, LIST_SCAN_SLACK } from '../log-store.js';

export interface SqliteStoreOptions {
  path: string;
  sync: SyncMode;
  idempotencyTtlMs: number;
  /** How the WAL is fsynced with sync = full (a test holds or fails it); by default fdatasync. */
  datasync?: ConstructorParameters<typeof WalSyncer>[2];
  /** PRAGMA quick_check at opening for files up to this many bytes (0: never; default: never). */
  startupCheckMaxBytes?: number;
  onFatal?: (err: Error) => void;
}

interface Meta {
  epoch: string;
  head: number;
  horizon: number;
  lastTs: number;
  records: number;
  stateKeys: number;
  liveKeys: number;
  /** 16 hex digits in the meta row; null until worked out. */
  digest: DigestSum | null;
  /** In memory only: see CompactionBacklog.supersededSince. */
  supersededSince: number | null;
}

/** Free space asked for before readiness comes back after a write found the disk full. */
const MIN_FREE_BYTES = 4 * 1024 * 1024;

// The hottest live entries, kept by get() and every append: always the key's current one,
// as this process is the only writer and compaction never touches a live key's record.
const ENTRY_CACHE = { maxChars: 16 * 1024 * 1024, maxEntryChars: 64 * 1024 };

// The harness opens files as the store does.
export { openDatabase } from './database.js';

export class SqliteStore implements LogStore {
  readonly db: Database.Database;
  private meta: Meta;
  private readonly ttlMs: number;
  private readonly path: string;
  /** With STATELOG_SYNC=full: makes commits durable before anyone learns of them. */
  private readonly syncer: WalSyncer | null;
  /** The compaction run in progress, if any: told of every record a write supersedes. */
  private compaction: SupersessionListener | null = null;

  private readonly sql: Statements;
  private readonly entries = new LRUCache<string, CachedEntry>({
    maxSize: ENTRY_CACHE.maxChars,
    sizeCalculation: (entry) => entry.key.length + entry.value.length,
  });
  /** Snapshots still open: closed before the database so the checkpoint is not held back. */
  private readonly snapshots = new Set<SqliteSnapshot>();
  private readonly room = new WriteRoom(sqliteErrorKinds);
  private readonly lock: ProcessLock | null;
  private checkpointer: SqliteCheckpointer | null = null;
  private snapshotWorker: SnapshotWorker | null = null;
  /** The write path's transaction, wrapped once: db.transaction() builds its wrappers on every call. */
  private readonly writeGroup: (requests: WriteRequest[], ts: number, now: number) => { plan: WritePlan; meta: Meta; terms: (Term | null)[] };
  /** The committed state a group is planned from: the entry cache, else the tables. */
  private readonly source: StateSource;

  constructor(options: SqliteStoreOptions) {
    this.path = options.path;
    this.ttlMs = options.idempotencyTtlMs;
    ({ db: this.db, lock: this.lock } = openStoreFile(options.path, options.startupCheckMaxBytes ?? 0));
    const db = this.db;
    this.sql = prepareStatements(db);
    this.source = stateSource(this.sql, this.entries);
    // One transaction, so a refused request needs no savepoint. IMMEDIATE: SQLite refuses a deferred
    // one's upgrade to the write lock at once (SQLITE_BUSY) while a thread's connection holds it a moment.
    this.writeGroup = db.transaction((requests: WriteRequest[], ts: number, now: number) => {
      const plan = planWrites({ requests, head: this.meta.head, now, idempotencyTtlMs: this.ttlMs }, this.source);
      return { plan, ...this.writePlan(plan, ts) };
    }).immediate;
    // No recount at start-up: every change to the counters commits with the rows it counts.
    const meta = this.readMeta();
    // The oldest record's time bounds when the first superseded one was: the compactor may run early, never late.
    const oldest = meta.records > meta.stateKeys ? (this.sql.oldestTs.get() as number | undefined) : undefined;
    this.meta = { ...meta, supersededSince: oldest ?? null };
    if (this.meta.digest === null) {
      // A database made before the digest: worked out once from the state rows.
      const hex = digestHex(digestOf(this.sql.liveTerms.iterate() as IterableIterator<{ key: string; offset: number }>));
      this.sql.saveDigest.run(hex);
      this.meta.digest = DigestSum.fromHex(hex);
    }
    // Nothing known durable yet: the first commit or read fsyncs what a killed predecessor left.
    this.syncer = options.sync === 'full' && options.path !== ':memory:' ? new WalSyncer(`${options.path}-wal`, () => this.meta.head, options.datasync, options.onFatal) : null;
    this.consumers = new SqliteConsumers(db, () => this.position(), this.syncer !== null);
    // A large backlog is about to be compacted: its checkpointer's thread starts now, not during the run.
    if (meta.records - meta.stateKeys >= EARLY_CHECKPOINTER_RECORDS) this.compactionCheckpointer();
    // Started now, so that a snapshot opens at the head its request found.
    if (options.path !== ':memory:') this.snapshotWorker = new SnapshotWorker(options.path);
  }

  readonly appliesBeforeReturning = true;
  readonly consumers: SqliteConsumers;

  get epoch(): string {
    return this.meta.epoch;
  }

  position(): LogPosition {
    return { head: this.meta.head, horizon: this.meta.horizon, epoch: this.meta.epoch };
  }

  /** This process is the only writer: what it knows is the database's head. */
  async readPosition(): Promise<LogPosition> {
    return this.position();
  }

  watchHead(): () => void {
    return () => {};
  }

  async get(key: string): Promise<StoredEntry | null> {
    let entry = this.entries.get(key) ?? null;
    if (!entry) {
      entry = (this.sql.entry.get(key) as StoredEntry | undefined) ?? null;
      if (entry) this.cache(entry);
    }
    // Cached or not, a value past its expiry is absent until its tombstone replaces it.
    if (entry && !liveAt({ offset: entry.offset, live: true, expiresAt: entry.expiresAt ?? null }, Date.now())) entry = null;
    // Absence may be a delete not yet on disk: only the head bounds it.
    const waiting = this.durable(entry?.offset ?? this.meta.head);
    if (waiting) await waiting;
    return entry;
  }

  async list(query: ListQuery): Promise<ListPage> {
    const params = { ...liveEntriesParams(query.prefix, query.afterKey, query.limit, Date.now()), scan: query.limit + LIST_SCAN_SLACK };
    const rows = this.sql.list.iterate(params) as IterableIterator<StoredEntry>;
    // Stepped row by row in one synchronous read, so that large values stop the page early.
    const items: StoredEntry[] = [];
    let chars = 0;
    let truncated = false;
    for (const row of rows) {
      if (query.maxChars !== undefined && items.length > 0 && chars >= query.maxChars) {
        truncated = true;
        break;
      }
      items.push(row);
      chars += row.key.length + row.value.length;
    }
    // A short page either reached the end or stopped at its scan bound (synchronously: the same state).
    const scannedTo = !truncated && items.length < query.limit ? (this.sql.listScanEnd.get(params) as string | undefined) : undefined;
    const head = this.meta.head;
    await this.durable(head);
    if (truncated) return { items, head, truncated };
    return scannedTo === undefined ? { items, head } : { items, head, scannedTo };
  }

  async readChanges(query: ChangesQuery): Promise<ChangesPage> {
    const until = changesUntil(query);
    const { after, limit } = query;
    const rows =
      query.key !== undefined
        ? this.sql.keyChanges.iterate({ after, until, key: query.key, limit })
        : this.sql.changes.iterate({ after, until, lower: query.prefix, upper: prefixUpperBound(query.prefix), limit });
    const { rows: records, stoppedByChars } = takePage(
      rows as IterableIterator<unknown[]>,
      toRecord,
      (record) => record.key.length + (record.value?.length ?? 0),
      query.maxChars,
    );
    const full = stoppedByChars || records.length === query.limit;
    // Synchronous: nothing can commit between the read and these.
    const head = this.meta.head;
    const page = { records, head, horizon: this.meta.horizon, full, examined: Math.min(head, until) };
    await this.durable(page.head);
    return page;
  }

  async history(query: HistoryQuery): Promise<HistoryPage> {
    const before = query.before ?? Number.MAX_SAFE_INTEGER;
    const params = { key: query.key, before, limit: query.limit, scan: HISTORY_SCAN_RECORDS };
    const { rows: records, stoppedByChars } = takePage(
      this.sql.history.iterate(params) as IterableIterator<unknown[]>,
      toRecord,
      (record) => record.key.length + (record.value?.length ?? 0),
      query.maxChars,
    );
    const examinedTo = (this.sql.historyScanEnd.get({ before, scan: HISTORY_SCAN_RECORDS }) as number | undefined) ?? null;
    // Synchronous: nothing can commit between the reads and this.
    const page = { records, head: this.meta.head, full: stoppedByChars || records.length === query.limit, examinedTo };
    await this.durable(page.head);
    return page;
  }

  async openSnapshot(prefix: string): Promise<SnapshotReader> {
    if (!this.db.open) throw new Error('the store is closed');
    if (!this.snapshotWorker?.usable) this.snapshotWorker = new SnapshotWorker(this.path);
    const snapshot = await SqliteSnapshot.open(this.snapshotWorker, prefix, (closed) => this.snapshots.delete(closed));
    this.snapshots.add(snapshot);
    try {
      await this.durable(snapshot.offset);
    } catch (err) {
      snapshot.close();
      throw err;
    }
    return snapshot;
  }

  /** Waits until every commit up to `offset` is on disk: no one is shown what a power loss could take back. */
  private durable(offset: number, waiter: Waiter = 'reader'): Promise<void> | undefined {
    // No promise at all in the usual case: a read of durable data costs no extra tick.
    return this.syncer && !this.syncer.covers(offset) ? this.syncer.through(offset, waiter) : undefined;
  }

  private readMeta(): Omit<Meta, 'supersededSince'> {
    const row = this.sql.meta.get() as Omit<Meta, 'supersededSince' | 'digest'> & { digest: string | null };
    return { ...row, digest: row.digest === null ? null : DigestSum.fromHex(row.digest) };
  }

  async commit(requests: WriteRequest[], now: number): Promise<WriteResult[]> {
    const results = this.commitGroup(requests, now);
    // Refusals too: a 409 tells the current offset, which must not be taken back either.
    await this.durable(this.meta.head, requests.length === 1 ? 'lone commit' : 'group commit');
    return results;
  }

  // Apart from commit() so that the plan is garbage while the answers wait for the fsync: a
  // suspended async function keeps its locals, and a scavenge would copy every group's plan.
  private commitGroup(requests: WriteRequest[], now: number): WriteResult[] {
    this.syncer?.check();
    const ts = Math.max(now, this.meta.lastTs);
    // On failure the whole transaction rolled back, and nothing in memory changed yet.
    let written: ReturnType<typeof this.writeGroup>;
    try {
      written = this.writeGroup(requests, ts, now);
    } catch (err) {
      this.room.failed(err);
      throw err;
    }
    this.room.committed();
    const { plan, meta, terms } = written;
    this.meta = meta;
    // Each key's final row: a record the group superseded itself never needs an entry.
    plan.state.forEach((state, key) => {
      if (state.value === null) this.entries.delete(key);
      else this.cache({ key, value: state.value, offset: state.offset, ts, expiresAt: state.expiresAt ?? null, term: terms[state.offset - plan.base - 1]! });
    });
    return plan.results;
  }

  /** Inside the group's transaction: the plan's rows, and the counters they make. */
  private writePlan(plan: WritePlan, ts: number): { meta: Meta; terms: (Term | null)[] } {
    const meta = this.meta;
    for (const [key, answer] of plan.remember) this.sql.remember.run(key, answer.fingerprint, answer.answer, answer.expiresAt);
    if (plan.records.length === 0) return { meta, terms: [] };
    this.appendRecords(plan.records, ts);
    if (this.compaction) for (const record of plan.records) if (record.previous) this.compaction.superseded(record.key, record.previous.offset);
    this.writeState(plan.state);
    // A copy: the transaction may still roll back, leaving this.meta as it was.
    const digest = meta.digest!.copy();
    const terms = applyToDigest(digest, plan);
    const next: Meta = {
      ...meta,
      head: plan.head,
      lastTs: ts,
      records: meta.records + plan.records.length,
      stateKeys: meta.stateKeys + plan.newKeys,
      liveKeys: meta.liveKeys + plan.liveDelta,
      digest,
      supersededSince: plan.superseded ? (meta.supersededSince ?? ts) : meta.supersededSince,
    };
    const { head, lastTs, records, stateKeys, liveKeys } = next;
    this.sql.saveMeta.run({ head, lastTs, records, stateKeys, liveKeys, digestText: digest.hex() });
    return { meta: next, terms };
  }

  private appendRecords(records: WritePlan['records'], ts: number): void {
    runInStatements(records, LOG_ROWS_A_STATEMENT, 5, { many: this.sql.appendRun, one: this.sql.append }, (record, args, at) => {
      args[at] = record.offset;
      args[at + 1] = record.key;
      args[at + 2] = record.op;
      args[at + 3] = record.value;
      args[at + 4] = ts;
    });
  }

  /** Each key's final state row, in key order (see STATE_ROWS_A_STATEMENT). */
  private writeState(state: WritePlan['state']): void {
    const keys = [...state.keys()].sort();
    runInStatements(keys, STATE_ROWS_A_STATEMENT, 4, { many: this.sql.setStateRun, one: this.sql.setState }, (key, args, at) => {
      const row = state.get(key)!;
      args[at] = key;
      args[at + 1] = row.offset;
      args[at + 2] = row.live ? 1 : 0;
      args[at + 3] = row.expiresAt ?? null;
    });
  }

  /** Keeps a key's live entry, or drops the key's old one when the entry is too large to keep. */
  private cache(entry: CachedEntry): void {
    if (entry.key.length + entry.value.length <= ENTRY_CACHE.maxEntryChars) this.entries.set(entry.key, entry);
    else this.entries.delete(entry.key);
  }

  async counters(): Promise<StoreCounters> {
    const { head, horizon, records, stateKeys, liveKeys, digest } = this.meta;
    // Read with the meta row (synchronously): the due keys the expirer has not reached.
    const expiredKeys = this.sql.expiredCount.get(Date.now()) as number;
    await this.durable(head);
    return countersOf({ head, horizon, records, liveKeys, stateKeys, expiredKeys, dbBytes: this.fileBytes(), digest: digest!.hex() });
  }

  async dueExpiries(now: number, limit: number): Promise<DueExpiry[]> {
    return this.sql.dueExpiries.all(now, limit) as DueExpiry[];
  }

  async compactionBacklog(): Promise<CompactionBacklog> {
    const { records, stateKeys, supersededSince } = this.meta;
    return { records, superseded: records - stateKeys, supersededSince };
  }

  async startCompaction(policy: CompactionPolicy, budget: CompactionBudget): Promise<CompactionPass> {
    return new SqliteCompactionPass(this.compactionHost(), policy, budget);
  }

  private compactionHost(): CompactionHost {
    return {
      db: this.db,
      meta: () => this.meta,
      transaction: <T>(work: () => T): T => {
        const before = { ...this.meta };
        // A lost step costs only its redoing: not fsynced; the next write's fsync covers it.
        try {
          // IMMEDIATE for the reason the write group's transaction is.
          return this.db.transaction(work).immediate();
        } catch (err) {
          this.meta = before;
          throw err;
        }
      },
      recordRemoval: (records: number, keys: number, horizon: number): void => {
        const meta = this.meta;
        meta.records -= records;
        meta.stateKeys -= keys;
        meta.horizon = Math.max(meta.horizon, horizon);
        this.sql.saveRemoval.run(meta);
      },
      setSupersededSince: (ts: number | null): void => {
        this.meta.supersededSince = ts;
      },
      checkpointer: () => this.compactionCheckpointer(),
      listen: (listener: SupersessionListener): void => {
        this.compaction = listener;
      },
      unlisten: (listener: SupersessionListener): void => {
        if (this.compaction === listener) this.compaction = null;
      },
    };
  }

  private compactionCheckpointer(): SqliteCheckpointer | null {
    if (this.path === ':memory:') return null;
    if (!this.checkpointer?.usable) this.checkpointer = new SqliteCheckpointer(this.path);
    return this.checkpointer;
  }

  private fileBytes(): number {
    const main = (this.sql.pageCount.get() as number) * (this.sql.pageSize.get() as number);
    if (this.path === ':memory:') return main;
    try {
      return main + statSync(`${this.path}-wal`).size;
    } catch {
      return main;
    }
  }

  async ping(): Promise<void> {
    this.syncer?.check();
    this.sql.pageSize.get();
    await this.room.check((failure) => this.probeWrite(failure));
  }

  /** After a full disk: whether a write can commit again; free space is asked for too, as reused WAL frames may hold too little. */
  private probeWrite(failure: Error): void {
    const { bavail, bsize } = statfsSync(dirname(this.path));
    if (bavail * bsize < MIN_FREE_BYTES) throw failure;
    this.sql.probe.run();
  }

  async purgeIdempotency(now: number): Promise<number> {
    return this.sql.purge.run(now).changes;
  }

  async close(): Promise<void> {
    if (!this.db.open) return;
    // Without a syncer nothing is awaited: the file and its lock are free at once for a reopen.
    if (this.syncer) await this.syncer.close();
    for (const snapshot of this.snapshots) snapshot.close();
    this.checkpointer?.close();
    // Its read transactions end before the checkpoint, which would wait for them.
    const snapshotsClosed = this.snapshotWorker?.close();
    if (snapshotsClosed) await snapshotsClosed;
    this.db.pragma('wal_checkpoint(TRUNCATE)');
    this.db.close();
    this.lock?.release();
  }
}
