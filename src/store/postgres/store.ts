// The PostgreSQL log store, shared by stateless nodes: offsets in commit order through the
// meta row's lock, held for the append alone (its flush is waited for outside it, by a barrier
// that serves many commits: durable-head.ts), and groups planned unlocked where they may be
// (write-group.ts; docs/postgres.md).
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { SyncMode } from '../../config.js';
import { digestHex } from '../../contract/digest.js';
import { StoreError, storeErrorKind, translate, WriteRoom } from '../store-errors.js';
import { postgresErrorKinds } from './errors.js';
import type {
  CountedMeta,
  ChangesPage,
  ChangesQuery,
  HistoryPage,
  HistoryQuery,
  ListPage,
  ListQuery,
  LogPosition,
  LogStore,
  StoreCounters,
  StoredEntry,
  StoredRecord,
  DueExpiry,
  WriteRequest,
  WriteResult,
  StoreReadiness,
  CompactionBacklog,
  CompactionBudget,
  CompactionPolicy,
} from '../log-store.js';
import { changesUntil, countersOf, HISTORY_SCAN_RECORDS, LIST_SCAN_SLACK } from '../log-store.js';
import { PgCompactionPass } from './compaction.js';
import { PgConsumers } from './consumers.js';
import { DurableHead, NotDurable } from './durable-head.js';
import { HeadWatch } from './head-watch.js';
import { KnownPosition } from './known-position.js';
import { ReadinessProbe } from './readiness-probe.js';
import { WRITE_CONNECTIONS, WriteConnections, type SessionState } from './write-connections.js';
import { migratePostgres } from './migrations.js';
import { GroupWriter } from './write-group.js';
import { PgSnapshot } from './snapshot.js';
import {
  BARRIER,
  CHANGES_SQL,
  COUNTERS_SQL,
  DUE_EXPIRIES_SQL,
  GET,
  KEY_HISTORY_SQL,
  LIST_SQL,
  NOTIFY,
  PROBE_ROWS,
  PROBE_SQL,
  PURGE_SQL,
  SESSION_SQL,
  pgTypes,
  prefixUpperBound,
} from './sql.js';

/** How long a node waits for a new connection to the database. */
const CONNECT_TIMEOUT_MS = 10_000;

export interface PgStoreOptions {
  url: string;
  poolSize: number;
  /** Statement timeout (0: none): a network that drops packets silently would hold requests for TCP's minutes. */
  queryTimeoutMs?: number;
  /** Connections for snapshots, each held while its snapshot streams. */
  snapshotPoolSize: number;
  /** full: the server's own synchronous_commit (on by default); normal: off for statelog's sessions. */
  sync: SyncMode;
  idempotencyTtlMs: number;
  /** How long a read waits for the log to be durable up to what it shows (default 10000; the write deadline). */
  durableWaitMs?: number;
  /** Period of the catch-up read of the head (default 1000). */
  catchUpMs?: number;
  migrationsDir?: string;
}

const PURGE_BATCH = 1000;

export class PgStore implements LogStore {
  private readonly pool: pg.Pool;
  private readonly snapshotPool: pg.Pool;
  /** Commits, on connections without a statement timeout (write-connections.ts). */
  private readonly writes: WriteConnections;
  /** The barriers that make commits durable, one at a time, on a connection of their own. */
  private readonly barriers: WriteConnections;
  /** Applies each group commit, planned or under the lock (write-group.ts). */
  private readonly groups: GroupWriter;
  private readonly durable: DurableHead;
  private readonly watch: HeadWatch;
  private readonly probe: ReadinessProbe;
  private readonly errorWatchers = new Set<(err: Error) => void>();
  private readonly snapshots = new Set<PgSnapshot>();
  private readonly passes = new Set<PgCompactionPass>();
  private readonly known = new KnownPosition();
  readonly consumers: PgConsumers;
  private closed = false;
  private readonly room = new WriteRoom(postgresErrorKinds);
  /** Tags this node's notifications, so that it does not take its own commits for news. */
  private readonly node = randomUUID();
  /** Connection settings with no statement timeout (the migrations', LISTEN's). */
  private readonly untimedClient: pg.ClientConfig;

  private constructor(private readonly options: PgStoreOptions) {
    const client: pg.ClientConfig = {
      connectionString: options.url,
      types: pgTypes,
      application_name: 'statelog',
      keepAlive: true,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    };
    const settings = [
      // A vanished node's session (and its compaction lock) is dropped within 25 s, not TCP's hours.
      'tcp_keepalives_idle=10',
      'tcp_keepalives_interval=5',
      'tcp_keepalives_count=3',
      // normal: acknowledged before the server flushes its WAL; a crash of the server may lose the last writes.
      ...(options.sync === 'normal' ? ['synchronous_commit=off'] : []),
    ];
    const pgOptions = (more: string[]) => [...settings, ...more].map((setting) => `-c ${setting}`).join(' ');
    // On the pools only, not on `client` (see untimedClient). A timeout shorter than the
    // connect timeout bounds the wait for a connection too: a new one stalls as well.
    const answered = options.queryTimeoutMs
      ? { query_timeout: options.queryTimeoutMs, connectionTimeoutMillis: Math.min(options.queryTimeoutMs, CONNECT_TIMEOUT_MS) }
      : {};
    this.pool = new pg.Pool({
      ...client,
      ...answered,
      // The meta row is every writer's lock: a node stalled inside a write transaction must not hold it.
      options: pgOptions(['idle_in_transaction_session_timeout=10000']),
      max: options.poolSize,
      idleTimeoutMillis: 30_000,
    });
    this.snapshotPool = new pg.Pool({ ...client, ...answered, options: pgOptions([]), max: options.snapshotPoolSize, idleTimeoutMillis: 10_000 });
    // Appends commit without waiting for their flush (the barrier waits, outside the lock).
    const writePool = new pg.Pool({
      ...client,
      options: pgOptions(['idle_in_transaction_session_timeout=10000', ...(options.sync === 'full' ? ['synchronous_commit=off'] : [])]),
      max: WRITE_CONNECTIONS,
      idleTimeoutMillis: 30_000,
    });
    // The server's own synchronous_commit: a barrier's commit waits as a write's would.
    const barrierPool = new pg.Pool({ ...client, options: pgOptions([]), max: 1, idleTimeoutMillis: 30_000 });
    const check = async (pid: number): Promise<SessionState> => {
      const { rows } = await this.pool.query<{ state: string | null; wait_event: string | null }>(SESSION_SQL, [pid]);
      const session = rows[0];
      if (!session || session.state === 'idle') return 'gone';
      return session.wait_event === 'SyncRep' ? 'waiting_for_standby' : 'running';
    };
    this.writes = new WriteConnections(writePool, check);
    this.barriers = new WriteConnections(barrierPool, check);
    this.groups = new GroupWriter({
      reads: this.pool,
      writes: this.writes,
      node: this.node,
      idempotencyTtlMs: options.idempotencyTtlMs,
      learnHorizon: (horizon) => this.learn({ head: 0, horizon }, true),
    });
    this.durable = new DurableHead(options.sync === 'full' ? { run: () => this.barrier(), announce: (head) => this.announce(head) } : undefined);
    for (const pool of [this.pool, this.snapshotPool, writePool, barrierPool]) {
      // An idle pooled connection that breaks must not take the process down,
      pool.on('error', (err) => this.reportError(err));
      // nor a checked-out one, whose holder learns of the break from its next query.
      pool.on('connect', (client) => client.on('error', () => {}));
    }
    this.untimedClient = { ...client, options: pgOptions([]) };
    this.probe = new ReadinessProbe(this.untimedClient, () => this.room.check(() => this.probeWrite()), check);
    this.consumers = new PgConsumers(this.pool, (position) => this.learn(position, true));
    this.watch = new HeadWatch({
      node: this.node,
      client: this.untimedClient,
      // No deadline: while commits do not complete, the catch-up waits (one at a time) instead of
      // failing as a broken connection would.
      read: async () => {
        const position = await readMeta(this.pool);
        await this.durable.cover(position.head);
        return position;
      },
      learn: (position) => {
        // Another node's barrier made it durable.
        this.durable.learn(position.head);
        this.known.learn(position, true);
      },
      learnRead: (position) => this.known.read(position),
      onError: (err) => this.reportError(err),
      catchUpMs: options.catchUpMs ?? 1000,
    });
  }

  /** Connects, applies the migrations, reads the meta row and starts listening. */
  static async open(options: PgStoreOptions): Promise<PgStore> {
    const store = new PgStore(options);
    try {
      // Its own connection, without the statement timeout: the advisory lock waits for
      // as long as another node takes to migrate.
      const client = new pg.Client(store.untimedClient);
      client.on('error', () => {}); // a break surfaces as the failed query
      await client.connect();
      try {
        await migratePostgres(client, options.migrationsDir);
        // Not waited on: a node starts while commits cannot complete, and says so in /readyz.
        store.known.read(await readMeta(client));
      } finally {
        await client.end().catch(() => {});
      }
      // Each its own connection, neither needing the other.
      await Promise.all([store.watch.start(), store.probe.start()]);
    } catch (err) {
      await store.close();
      throw err;
    }
    return store;
  }

  /** A commit is a round trip to the database: the next group waits for it. */
  readonly appliesBeforeReturning = false;

  get epoch(): string {
    return this.known.value.epoch;
  }

  /** The latest position this node knows: its own commits, notifications and catch-up reads. */
  position(): LogPosition {
    return this.known.value;
  }

  async readPosition(): Promise<LogPosition> {
    const read = await this.readMeta(this.pool);
    this.known.read(read);
    return read;
  }

  watchHead(onHead: (head: number) => void, onError?: (err: Error) => void): () => void {
    const stop = this.known.watchHead(onHead);
    if (onError) this.errorWatchers.add(onError);
    return () => {
      stop();
      if (onError) this.errorWatchers.delete(onError);
    };
  }

  watchRewind(onRewind: (position: LogPosition) => void): () => void {
    return this.known.watchRewind(onRewind);
  }

  private learn(position: { head: number; horizon?: number }, fromElsewhere: boolean): void {
    this.known.learn(position, fromElsewhere);
  }

  /** A broken connection: the database may be another one now (a failover), so what the node holds is suspect. */
  private reportError(err: Error): void {
    this.known.lost();
    this.durable.reset();
    // Told by kind, as the store's methods' failures are: an outage is logged as one, briefly.
    const translated = translate(err, postgresErrorKinds) as Error;
    for (const watcher of this.errorWatchers) watcher(translated);
  }

  /** The meta row, once its head is durable. */
  private async readMeta(db: pg.Pool): Promise<LogPosition> {
    const position = await readMeta(db);
    await this.shown(position.head);
    return position;
  }

  /** Waits until an answer that shows offsets up to `offset` shows only durable records, for as long as a write may wait. */
  private async shown(offset: number): Promise<void> {
    try {
      await this.durable.cover(offset, this.options.durableWaitMs ?? 10_000);
    } catch (err) {
      // The barrier's commit is not the reader's: its records are there to be read again.
      if (err instanceof NotDurable || storeErrorKind(err) === 'outcome_unknown') throw new StoreError('unavailable', err as Error);
      throw err;
    }
  }

  /**
   * Commits a transaction that writes WAL, synchronously: every commit before its statement is then
   * durable. It notifies nobody: that would hold every node's barriers behind its flush.
   */
  private async barrier(): Promise<number> {
    const connection = await this.barriers.connect();
    try {
      return (await connection.commits(() => connection.client.query<{ head: number }>(BARRIER()))).rows[0]!.head;
    } finally {
      connection.release();
    }
  }

  /**
   * Tells the other nodes of a durable head: their readers may be served up to it (a lost
   * notification waits for their catch-up read). A transaction of its own, which writes no WAL, so
   * its commit holds the notification lock for no flush. Never in the round trip of the barrier
   * that made it durable: one whose wait for the standby was cancelled would announce a head that
   * is not. A failure is the database's, which the next barrier or the readiness probe tells.
   */
  private announce(head: number): void {
    this.pool.query(NOTIFY([`${head} ${this.node}`])).catch(() => {});
  }

  async get(key: string): Promise<StoredEntry | null> {
    type Row = { key: string; value: string; seq: number; ts: number; expires_at: number | null };
    const { rows } = await this.pool.query<Row>(GET([key, Date.now()]));
    const row = rows[0];
    if (!row) return null;
    await this.shown(row.seq);
    return { key: row.key, value: row.value, offset: row.seq, ts: row.ts, expiresAt: row.expires_at };
  }

  async list(query: ListQuery): Promise<ListPage> {
    type Row = { head: number; scan_end: string | null; key: string | null; value: string; seq: number; ts: number; expires_at: number | null; taken: number | null };
    const { rows } = await this.pool.query<Row>(LIST_SQL, [
      query.prefix,
      query.afterKey ?? '',
      prefixUpperBound(query.prefix),
      query.limit,
      query.maxChars ?? null,
      Date.now(),
      query.limit + LIST_SCAN_SLACK,
    ]);
    const { head, scan_end: scanEnd } = rows[0]!;
    await this.shown(head);
    this.learn({ head }, true);
    const items = rows.filter((row) => row.key !== null).map((row) => ({ key: row.key!, value: row.value, offset: row.seq, ts: row.ts, expiresAt: row.expires_at }));
    // Keys were read past the size bound: the page stopped early and more follow.
    if (items.length < (rows[0]!.taken ?? 0)) return { items, head, truncated: true };
    // A short page either reached the end or stopped at its scan bound.
    return scanEnd !== null && items.length < query.limit ? { items, head, scannedTo: scanEnd } : { items, head };
  }

  async readChanges(query: ChangesQuery): Promise<ChangesPage> {
    type Row = { head: number; horizon: number; epoch: string; lineage: string; taken: number | null } & Partial<StoredRecord & { seq: number }>;
    const until = changesUntil(query);
    const { rows } = await this.pool.query<Row>(CHANGES_SQL, [
      query.after,
      query.prefix,
      prefixUpperBound(query.prefix),
      query.limit,
      query.maxChars ?? null,
      until,
      query.key ?? null,
    ]);
    const { head, horizon, epoch, lineage } = rows[0]!;
    await this.shown(head);
    this.known.read({ head, horizon, epoch, lineage });
    const records: StoredRecord[] = [];
    for (const row of rows) {
      if (row.seq === null || row.seq === undefined) continue;
      const record: StoredRecord = { offset: row.seq, key: row.key!, op: row.op!, value: row.value ?? null, ts: row.ts! };
      if (row.expiresAt != null) record.expiresAt = row.expiresAt;
      records.push(record);
    }
    const taken = rows[0]!.taken ?? 0;
    const full = records.length === query.limit || records.length < taken;
    return { records, head, horizon, full, examined: Math.min(head, until), lineage };
  }

  async history(query: HistoryQuery): Promise<HistoryPage> {
    type Row = { head: number; examined_to: number | null; taken: number | null } & Partial<StoredRecord & { seq: number }>;
    const { rows } = await this.pool.query<Row>(KEY_HISTORY_SQL, [
      query.key,
      query.before ?? Number.MAX_SAFE_INTEGER,
      query.limit,
      query.maxChars ?? null,
      HISTORY_SCAN_RECORDS,
    ]);
    const { head, examined_to: examinedTo } = rows[0]!;
    await this.shown(head);
    this.learn({ head }, true);
    const records: StoredRecord[] = [];
    for (const row of rows) {
      if (row.seq === null || row.seq === undefined) continue;
      const record: StoredRecord = { offset: row.seq, key: row.key!, op: row.op!, value: row.value ?? null, ts: row.ts! };
      if (row.expiresAt != null) record.expiresAt = row.expiresAt;
      records.push(record);
    }
    const taken = rows[0]!.taken ?? 0;
    return { records, head, full: records.length === query.limit || records.length < taken, examinedTo };
  }

  async openSnapshot(prefix: string): Promise<PgSnapshot> {
    if (this.closed) throw new Error('the store is closed');
    const snapshot = await PgSnapshot.open(this.snapshotPool, prefix, (closed) => this.snapshots.delete(closed));
    this.snapshots.add(snapshot);
    try {
      await this.shown(snapshot.offset);
    } catch (err) {
      snapshot.close();
      throw err;
    }
    return snapshot;
  }

  // Planned from an unlocked read and written by statelog_append() in one statement; applied
  // under the lock instead when it must be (docs/postgres.md, "Group commit per node"). Answered
  // once a barrier has made it durable; the next group may append meanwhile.
  async commit(requests: WriteRequest[], now: number, onApplied?: () => void): Promise<WriteResult[]> {
    let results: WriteResult[];
    try {
      const applied = await this.groups.apply(requests, now);
      onApplied?.();
      await this.durable.cover(applied.head);
      // Others' commits below this group's are durable too.
      this.learn({ head: applied.base }, true);
      this.learn({ head: applied.head }, false);
      results = applied.results;
    } catch (err) {
      this.room.failed(err);
      throw err;
    }
    this.room.committed();
    return results;
  }

  /** Planned appends refused because a key they read had changed (each is planned again). */
  get planConflicts(): number {
    return this.groups.planConflicts;
  }

  async counters(): Promise<StoreCounters> {
    const { rows } = await this.pool.query<CountedMeta>(COUNTERS_SQL, [Date.now()]);
    const meta = rows[0]!;
    await this.shown(meta.head);
    this.learn(meta, true);
    return countersOf({ ...meta, digest: digestHex(BigInt(meta.digest)) });
  }

  async dueExpiries(now: number, limit: number): Promise<DueExpiry[]> {
    const { rows } = await this.pool.query<{ key: string; seq: number }>(DUE_EXPIRIES_SQL, [now, limit]);
    return rows.map((row) => ({ key: row.key, offset: row.seq }));
  }

  readiness(): StoreReadiness {
    // A write that just failed for want of space is known before the next probe.
    if (this.room.failing) return { ready: false, reason: 'no_space', message: 'writes fail: the database has no room to write' };
    return this.probe.current();
  }

  async ping(): Promise<void> {
    await this.pool.query('SELECT 1');
    await this.room.check(() => this.probeWrite());
  }

  /** A write that needs new pages of the log, rolled back (PROBE_SQL). */
  private async probeWrite(): Promise<void> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      await client.query(PROBE_SQL, [PROBE_ROWS]);
    } finally {
      await client.query('ROLLBACK').catch((err: Error) => (broken = err));
      client.release(broken);
    }
  }

  async purgeIdempotency(now: number): Promise<number> {
    let total = 0;
    for (;;) {
      const { rowCount } = await this.pool.query(PURGE_SQL, [now, PURGE_BATCH]);
      total += rowCount ?? 0;
      if ((rowCount ?? 0) < PURGE_BATCH) return total;
    }
  }

  async compactionBacklog(): Promise<CompactionBacklog> {
    const { rows } = await this.pool.query<{ records: number; stateKeys: number; supersededSince: number | null }>(
      'SELECT records, state_keys AS "stateKeys", superseded_since AS "supersededSince" FROM meta WHERE id = 1',
    );
    const { records, stateKeys, supersededSince } = rows[0]!;
    return { records, superseded: records - stateKeys, supersededSince };
  }

  /** One node compacts at a time (an advisory lock); a call on another waits for that run to end. */
  async startCompaction(policy: CompactionPolicy, budget: CompactionBudget): Promise<PgCompactionPass> {
    if (this.closed) throw new Error('the store is closed');
    const pass = await PgCompactionPass.start(this.pool, policy, budget, (done) => this.passes.delete(done));
    this.passes.add(pass);
    return pass;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.watch.stop();
    await this.probe.stop();
    for (const snapshot of this.snapshots) snapshot.close();
    // A run the compactor abandoned at a step boundary gives its lock and connection back.
    await Promise.all([...this.passes].map((pass) => pass.abandon()));
    await Promise.all([this.pool.end(), this.snapshotPool.end(), this.writes.end()]);
  }
}

/** A group applied (visible to other transactions) but perhaps not yet durable: offsets (base, head]. */
/** The meta row as one statement reads it. */
async function readMeta(db: pg.Pool | pg.ClientBase): Promise<LogPosition> {
  return (await db.query<LogPosition>('SELECT head, horizon, epoch, lineage FROM meta WHERE id = 1')).rows[0]!;
}
