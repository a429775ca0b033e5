// The embedded SQLite log store. One process owns the file and is its only writer;
// better-sqlite3 is synchronous, so a commit of a group of requests runs as one
// uninterrupted transaction on the event loop, and its fsync (STATELOG_SYNC=full) runs
// after it on the thread pool (wal-syncer.ts).
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
  /** Called once when an fsync has failed: nothing more can be promised durable. */
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
  /** The state digest (src/contract/digest.ts), kept as 16 hex digits in the meta row; null until worked out. */
  digest: DigestSum | null;
  /** In memory only: see CompactionBacklog.supersededSince. */
  supersededSince: number | null;
}

/** Free space asked for before readiness comes back after a write found the disk full. */
const MIN_FREE_BYTES = 4 * 1024 * 1024;

/**
 * The hottest live entries, kept by get() and by every append: a read of a cached key,
 * and a write's look at its current state, skip SQLite. This process is the file's only
 * writer and every committed record updates or evicts its key (after the commit, so a
 * rolled back group leaves it as it was), so an entry here is always the key's current
 * one. Compaction never touches a live key's record. Bounded by the characters of keys
 * and values.
 */
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
  /** Whether the last write failed for want of space (SQLITE_FULL): readiness fails until one can commit. */
  private readonly room = new WriteRoom(sqliteErrorKinds);
  /** This process's hold on the file (none for :memory:). */
  private readonly lock: ProcessLock | null;
  /** The compaction runs' checkpointer, kept from the first run that needs one until close. */
  private checkpointer: SqliteCheckpointer | null = null;
  /** The snapshots' worker thread (snapshot-worker.ts), until close. */
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
    // Planned and written in one transaction: a refused request is never written, so
    // no request needs a savepoint of its own. BEGIN IMMEDIATE, as every transaction of
    // the store that reads before it writes: a deferred one takes the write lock only at
    // its first write, and SQLite refuses that upgrade at once (SQLITE_BUSY, whatever the
    // busy timeout) if another connection holds the lock just then, as the checkpoint and
    // snapshot threads' connections do for a moment when they catch the WAL index mid-update.
    this.writeGroup = db.transaction((requests: WriteRequest[], ts: number, now: number) => {
      const plan = planWrites({ requests, head: this.meta.head, now, idempotencyTtlMs: this.ttlMs }, this.source);
      return { plan, ...this.writePlan(plan, ts) };
    }).immediate;
    // The counters need no check or recount at start-up: every change to them (appends
    // and compaction steps alike) is written in the same transaction as the rows it
    // counts, so a crash at any point leaves both as of the same commit.
    const meta = this.readMeta();
    // When superseded records are left, the oldest record's time is a safe lower bound
    // of when the first of them was superseded: the compactor may run early, never late.
    const oldest = meta.records > meta.stateKeys ? (this.sql.oldestTs.get() as number | undefined) : undefined;
    this.meta = { ...meta, supersededSince: oldest ?? null };
    if (this.meta.digest === null) {
      // A database made before the digest: worked out once from the state rows.
      const hex = digestHex(digestOf(this.sql.liveTerms.iterate() as IterableIterator<{ key: string; offset: number }>));
      this.sql.saveDigest.run(hex);
      this.meta.digest = DigestSum.fromHex(hex);
    }
    // A syncer starts with nothing known durable: the first commit or read fsyncs
    // whatever a killed predecessor left in the page cache.
    this.syncer = options.sync === 'full' && options.path !== ':memory:' ? new WalSyncer(`${options.path}-wal`, () => this.meta.head, options.datasync, options.onFatal) : null;
    // A log opened with a large backlog is about to be compacted: the checkpointer's
    // thread starts now (a burst of CPU), not during the run.
    if (meta.records - meta.stateKeys >= EARLY_CHECKPOINTER_RECORDS) this.compactionCheckpointer();
    // Started now, so that a snapshot opens at the head as its request finds it, not a
    // thread's start-up later.
    if (options.path !== ':memory:') this.snapshotWorker = new SnapshotWorker(options.path);
  }

  readonly appliesBeforeReturning = true;

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
    // This process is the file's only writer: every commit goes through its own batcher.
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
    // Absence may be a delete not yet on disk: only the head bounds it. Awaited only
    // when there is a wait: a read of durable data then resolves without an extra turn.
    const waiting = this.durable(entry?.offset ?? this.meta.head);
    if (waiting) await waiting;
    return entry;
  }

  async list(query: ListQuery): Promise<ListPage> {
    const params = { ...liveEntriesParams(query.prefix, query.afterKey, query.limit, Date.now()), scan: query.limit + LIST_SCAN_SLACK };
    const rows = this.sql.list.iterate(params) as IterableIterator<StoredEntry>;
    // Rows are stepped one by one (synchronously: one consistent read), so a page of
    // large values stops early instead of loading them all.
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

  /**
   * Waits until every commit up to `offset` is on disk: no reader sees a record, and no
   * writer an answer, that a power loss could still take back (an offset once seen is
   * never reused for something else). Commits are fsynced on the event loop while the
   * disk is fast (wal-syncer.ts).
   */
  private durable(offset: number, waiter: Waiter = 'reader'): Promise<void> | undefined {
    // No promise at all in the usual case: a read of durable data costs no extra tick.
    return this.syncer && !this.syncer.covers(offset) ? this.syncer.through(offset, waiter) : undefined;
  }

  /** The meta row; a digest not yet worked out reads as null. */
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

  /**
   * The group's transaction and what it changes in memory. Apart from commit() so that
   * the plan is garbage while the answers wait for the fsync: a suspended async function
   * keeps all its locals, and a scavenge would copy the plan of every group in flight.
   */
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
        // A lost compaction step costs nothing but redoing it, so its commit is not
        // fsynced; the next write's fsync covers it.
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

  /**
   * After a write failed for want of space: whether one can commit again. A page's
   * worth of room may be found in the WAL's reused frames while a real write still
   * needs more, so a minimum of free space on the file system is asked for as well.
   */
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
    // Without a syncer nothing is awaited: the file and its lock are let go before this
    // returns its promise, so a caller may reopen the file at once.
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
