// One compaction run on the SQLite log, in bounded steps on the store's own connection
// (the writer's): removal transactions walk the log in offset order up to a cutoff fixed
// at the start, then incremental_vacuum gives the pages back, while WAL checkpoints run
// in a worker thread. Between steps the caller yields to the event loop, so group
// commits interleave; while requests keep the event loop busy, each step is also
// followed by a rest, so that the run never takes more than about half of it.
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { CompactionRules, lastCommittedBy, runLimits, supersededSinceAfterRun, type ScannedRecord } from '../compaction-rules.js';
import type { CompactionBudget, CompactionPass, CompactionPolicy } from '../log-store.js';
import type { SqliteCheckpointer } from './checkpointer.js';

/** What the run needs from the store that owns the connection and the counters. */
export interface CompactionHost {
  readonly db: Database.Database;
  /** The counters as they are now (the store's in-memory mirror of the meta row). */
  meta(): { readonly head: number; readonly lastTs: number; readonly records: number; readonly stateKeys: number };
  /** Runs `work` as one transaction; on failure the counters roll back with it. */
  transaction<T>(work: () => T): T;
  /** Inside that transaction: removes records and keys from the counters and raises the horizon. */
  recordRemoval(records: number, keys: number, horizon: number): void;
  setSupersededSince(ts: number | null): void;
  /**
   * Checkpoints off the event loop, the store's own (started on first use and kept until
   * the store closes); null for a database without a file (no WAL).
   */
  checkpointer(): SqliteCheckpointer | null;
  /** From now on, tells `listener` of every record a write supersedes (one listener at a time). */
  listen(listener: SupersessionListener): void;
  unlisten(listener: SupersessionListener): void;
}

export interface SupersessionListener {
  /** Called inside the write's transaction: `seq` was `key`'s latest record until now. */
  superseded(key: string, seq: number): void;
}

/**
 * Rows examined per statement at most, and at least. Within those bounds a chunk is
 * sized from the cost of the rows just examined to fit the time left in the step, so a
 * step ends close to its budget whether its rows go by range (well under a microsecond
 * each) or each pass through JavaScript (keys written since the cutoff: several).
 */
const CHUNK_ROWS = 256;
const MIN_CHUNK_ROWS = 16;
/** The cost of a row before any was measured: the dearer kind, so the first chunk stays short. */
const FIRST_ROW_COST_MS = 0.004;
/** Weight of the latest chunk, and of the latest commit, in their moving averages. */
const COST_WEIGHT = 0.25;
/**
 * A checkpoint starts after this much page-writing work of the steps (in ms: each
 * checkpoint costs the worker two fsyncs whatever it copies, so the pace does not follow
 * the steps' length)...
 */
const CHECKPOINT_AFTER_MS = 4;
/** ...and the run waits for it once this much more has piled up. */
const UNCHECKPOINTED_MS = 32;
/** Pages freed by the first incremental_vacuum step; later steps adapt to the time budget. */
const FIRST_VACUUM_PAGES = 256;
/**
 * While other work shares the event loop, each step is followed by a rest as long as
 * the step, or twice as long as the other work of the last cycle if that is longer (at
 * most MAX_REST_MS). Back to back, the steps would keep the loop busy all the time:
 * every request would wait for a step, a burst of them would queue behind step after
 * step, and on a machine whose cores are all taken a thread that never sleeps loses
 * the CPU for whole time slices. So the run takes at most half of the loop, and less
 * the more the requests need: a run that took the share an open-loop writer needs
 * would let the writes queue for as long as it lasts. Alone, the run does not rest.
 * The longest rest is also at most MAX_REST_BUDGETS step budgets, so that shorter
 * steps do not make the run under load slower in proportion.
 */
const OTHER_WORK_REST_RATIO = 2;
const MAX_REST_MS = 20;
const MAX_REST_BUDGETS = 10;
/** Busy time of the event loop between two steps, other than the step itself, that counts as other work. */
const OTHER_WORK_MS = 0.25;
/**
 * A run with at least this many superseded records gets its checkpointer before its
 * first step, and waits until the thread answers, so that the start of a thread (a V8
 * isolate and the SQLite driver, a burst of CPU) does not compete with the steps; a
 * store opened with such a backlog starts it at once. A smaller run gets it only if a
 * checkpoint falls due, or not at all.
 */
export const EARLY_CHECKPOINTER_RECORDS = 50_000;
/**
 * While a run has its checkpointer, SQLite's automatic checkpoint is off on the store's
 * connection: it would run on the event loop, copying frames and fsyncing twice, each
 * time the WAL passed 1,000 frames (some 30 times in a run of 1,000,000 records).
 * Checkpoints in the worker cannot start the WAL over while writes keep appending to
 * it, so once the WAL has this many frames the run lets the worker catch up and
 * checkpoints the few frames left on its own connection; the next transaction then
 * writes the WAL from its start again.
 */
const WAL_RESTART_FRAMES = 4_000;

type Phase = 'remove' | 'vacuum' | 'truncate' | 'done';

export class SqliteCompactionPass implements CompactionPass, SupersessionListener {
  removed = 0;
  tombstonesRemoved = 0;
  private phase: Phase = 'remove';
  private failed = false;
  /** Records with offsets up to here are older than the minimum lag. */
  private readonly cutoff: number;
  private readonly rules: CompactionRules;
  private cursor = 0;
  private vacuumPages = FIRST_VACUUM_PAGES;
  /** Moving averages: time a row of the log takes to examine, and a removal step to commit. */
  private rowCostMs = FIRST_ROW_COST_MS;
  private commitMs = 0;
  /** Time spent writing pages since the last checkpoint started. */
  private dirtyMs = 0;
  /** Started when the first checkpoint is due: a small run needs none before the last. */
  private checkpointer: SqliteCheckpointer | null | undefined;
  private checkpointing: Promise<void> | null = null;
  private checkpointFailure: Error | null = null;
  /** The store connection's automatic checkpoint, while the run has turned it off. */
  private autocheckpoint: number | null = null;
  /** Frames in the WAL at the last checkpoint. */
  private walFrames = 0;
  private started = false;
  /** The event loop's times at the end of the last step: what else it did since. */
  private loopAfterStep: EventLoopUtilization | null = null;
  private readonly sql;

  constructor(
    private readonly host: CompactionHost,
    policy: CompactionPolicy,
    private readonly budget: CompactionBudget,
  ) {
    const db = host.db;
    this.sql = {
      lastTsUpTo: db.prepare('SELECT ts FROM log WHERE seq <= ? ORDER BY seq DESC LIMIT 1').pluck(),
      firstTsAfter: db.prepare('SELECT ts FROM log WHERE seq > ? ORDER BY seq LIMIT 1').pluck(),
      chunkEnd: db.prepare('SELECT seq FROM log WHERE seq > ? ORDER BY seq LIMIT 1 OFFSET ?').pluck(),
      // Every record in the range except those plainly superseded by a record within
      // the cutoff, which are removed by range without crossing into JavaScript.
      special: db.prepare(
        `SELECT l.seq, l.key, l.op, l.ts, s.seq AS latest FROM log l LEFT JOIN state s ON s.key = l.key
         WHERE l.seq > @from AND l.seq <= @to AND (s.seq IS NULL OR s.seq = l.seq OR s.seq > @cutoff)
         ORDER BY l.seq`,
      ),
      removeBetween: db.prepare('DELETE FROM log WHERE seq > ? AND seq < ?'),
      removeOne: db.prepare('DELETE FROM log WHERE seq = ?'),
      forgetKey: db.prepare('DELETE FROM state WHERE key = ? AND seq = ?'),
      freePages: db.prepare('PRAGMA freelist_count').pluck(),
    };
    const limits = runLimits(policy);
    this.cutoff = this.lastSeqCommittedBy(limits.committedBy);
    this.rules = new CompactionRules(this.cutoff, limits.tombstoneCutTs);
    host.listen(this);
  }

  superseded(key: string, seq: number): void {
    this.rules.superseded(key, seq);
  }

  close(): void {
    this.host.unlisten(this);
    this.restoreAutocheckpoint();
  }

  async step(): Promise<boolean> {
    if (this.failed) throw new Error('a compaction run cannot go on after a failed step');
    try {
      if (this.checkpointFailure) throw this.checkpointFailure;
      if (!this.started) await this.start();
      switch (this.phase) {
        case 'remove':
          await this.checkpointIfDue();
          await this.restAfter(this.timed(() => this.removeStep()));
          return true;
        case 'vacuum':
          await this.checkpointIfDue();
          await this.restAfter(this.timed(() => this.vacuumStep()));
          return true;
        case 'truncate':
          await this.checkpointing;
          // Whatever the steps wrote since the last checkpoint is copied off the event
          // loop too, so that the final checkpoint on it has (almost) nothing left to copy.
          if (this.checkpointer) await this.checkpointer.checkpoint();
          this.truncateWal();
          this.phase = 'done';
          return false;
        case 'done':
          return false;
      }
    } catch (err) {
      this.failed = true;
      this.close();
      throw err;
    }
  }

  /** Before the first step: the checkpointer of a large run, up and answering. */
  private async start(): Promise<void> {
    this.started = true;
    const { records, stateKeys } = this.host.meta();
    if (records - stateKeys < EARLY_CHECKPOINTER_RECORDS) return;
    await this.startCheckpointer()?.checkpoint();
  }

  /** The run's checkpointer, started on first use (null without a database file). */
  private startCheckpointer(): SqliteCheckpointer | null {
    if (this.checkpointer !== undefined) return this.checkpointer;
    this.checkpointer = this.host.checkpointer();
    if (this.checkpointer) {
      this.autocheckpoint = this.host.db.pragma('wal_autocheckpoint', { simple: true }) as number;
      this.host.db.pragma('wal_autocheckpoint = 0');
    }
    return this.checkpointer;
  }

  private restoreAutocheckpoint(): void {
    if (this.autocheckpoint === null) return;
    const pages = this.autocheckpoint;
    this.autocheckpoint = null;
    if (this.host.db.open) this.host.db.pragma(`wal_autocheckpoint = ${pages}`);
  }

  /**
   * Rests after a step when the event loop had other work since the previous one (the
   * requests and commits that ran between the steps).
   */
  private async restAfter(stepMs: number): Promise<void> {
    const previous = this.loopAfterStep;
    this.loopAfterStep = performance.eventLoopUtilization();
    if (!previous) return;
    const otherMs = performance.eventLoopUtilization(this.loopAfterStep, previous).active - stepMs;
    if (otherMs < OTHER_WORK_MS) return;
    const maxRestMs = Math.min(MAX_REST_MS, MAX_REST_BUDGETS * this.budget.maxMs);
    const restMs = Math.min(Math.max(stepMs, OTHER_WORK_REST_RATIO * otherMs), maxRestMs);
    await new Promise((resolve) => setTimeout(resolve, restMs));
  }

  /**
   * Small, frequent checkpoints keep the WAL short. They run in the checkpointer's
   * thread while the steps go on, unless the disk falls behind: then the run waits
   * (without blocking the event loop) rather than let the WAL grow.
   */
  private async checkpointIfDue(): Promise<void> {
    if (this.walFrames >= WAL_RESTART_FRAMES) return this.restartWal();
    if (this.dirtyMs < CHECKPOINT_AFTER_MS) return;
    const checkpointer = this.startCheckpointer();
    if (!checkpointer) return;
    if (this.checkpointing) {
      if (this.dirtyMs < UNCHECKPOINTED_MS) return;
      await this.checkpointing;
    }
    this.dirtyMs = 0;
    this.checkpointing = checkpointer.checkpoint().then(
      (result) => {
        this.walFrames = result.log;
        this.checkpointing = null;
      },
      (err: Error) => {
        this.checkpointing = null;
        this.checkpointFailure ??= err;
      },
    );
  }

  /**
   * Lets the worker copy everything the steps wrote, then copies on the store's
   * connection what writes appended meanwhile (a few frames, and two fsyncs on the
   * event loop), so that the next transaction starts the WAL over.
   */
  private async restartWal(): Promise<void> {
    await this.checkpointing;
    await this.checkpointer!.checkpoint();
    this.host.db.pragma('wal_checkpoint(PASSIVE)');
    this.walFrames = 0;
    this.dirtyMs = 0;
  }

  /** The highest offset committed at or before `ts` (see lastCommittedBy). */
  private lastSeqCommittedBy(ts: number): number {
    const { head, lastTs } = this.host.meta();
    const search = lastCommittedBy(head, lastTs, ts);
    for (let probe = search.next(); ; ) {
      if (probe.done) return probe.value;
      const found = this.sql.lastTsUpTo.get(probe.value) as number | undefined;
      probe = search.next(found === undefined || found <= ts);
    }
  }

  /**
   * One removal transaction: chunks of the log in offset order until the budget is spent.
   * The commit (writing the step's pages to the WAL) blocks the event loop as much as
   * the chunks do, so the chunks get the budget less what commits have been taking.
   */
  private removeStep(): void {
    const started = performance.now();
    let bodyEnded = started;
    const step = this.host.transaction(() => {
      const bodyMs = Math.max(this.budget.maxMs - this.commitMs, this.budget.maxMs / 4);
      const totals = { removed: 0, keysRemoved: 0, horizon: 0 };
      let cursor = this.cursor;
      let rows = 0;
      for (let now = started; cursor < this.cutoff && rows < this.budget.maxRows && now - started < bodyMs; ) {
        const fits = Math.max(MIN_CHUNK_ROWS, Math.floor((bodyMs - (now - started)) / this.rowCostMs));
        const size = Math.min(CHUNK_ROWS, this.budget.maxRows - rows, fits);
        const end = this.sql.chunkEnd.get(cursor, size - 1) as number | undefined;
        const to = end === undefined ? this.cutoff : Math.min(end, this.cutoff);
        const chunk = this.removeChunk(cursor, to);
        totals.removed += chunk.removed;
        totals.keysRemoved += chunk.keysRemoved;
        totals.horizon = Math.max(totals.horizon, chunk.horizon);
        rows += size;
        cursor = to;
        const chunkStarted = now;
        now = performance.now();
        this.rowCostMs += COST_WEIGHT * ((now - chunkStarted) / size - this.rowCostMs);
      }
      this.host.recordRemoval(totals.removed, totals.keysRemoved, totals.horizon);
      if (cursor >= this.cutoff) this.settleSupersededSince();
      bodyEnded = performance.now();
      return { ...totals, cursor };
    });
    this.commitMs += COST_WEIGHT * (performance.now() - bodyEnded - this.commitMs);
    this.cursor = step.cursor;
    this.removed += step.removed;
    this.tombstonesRemoved += step.keysRemoved;
    if (this.cursor >= this.cutoff) {
      this.phase = 'vacuum';
      this.host.unlisten(this);
    }
  }

  /** Removes what may go among the records with offsets in (from, to]. */
  private removeChunk(from: number, to: number): { removed: number; keysRemoved: number; horizon: number } {
    const { kept, earlier, forget, horizon } = this.rules.decide(
      this.sql.special.all({ from, to, cutoff: this.cutoff }) as ScannedRecord[],
    );
    let removed = 0;
    for (const seq of earlier) removed += this.sql.removeOne.run(seq).changes;
    for (const { key, seq } of forget) this.sql.forgetKey.run(key, seq);
    let gapStart = from;
    for (const seq of kept) {
      removed += this.sql.removeBetween.run(gapStart, seq).changes;
      gapStart = seq;
    }
    removed += this.sql.removeBetween.run(gapStart, to + 1).changes;
    return { removed, keysRemoved: forget.length, horizon };
  }

  private settleSupersededSince(): void {
    const firstAfter = (this.sql.firstTsAfter.get(this.cutoff) as number | undefined) ?? null;
    this.host.setSupersededSince(supersededSinceAfterRun(this.host.meta(), firstAfter));
  }

  private vacuumStep(): void {
    const free = this.sql.freePages.get() as number;
    if (free === 0) {
      this.phase = 'truncate';
      return;
    }
    const started = performance.now();
    this.host.transaction(() => this.host.db.pragma(`incremental_vacuum(${Math.min(free, this.vacuumPages)})`));
    const ms = performance.now() - started;
    // Aim the next step at the time budget.
    const scale = ms > 0 ? this.budget.maxMs / ms : 2;
    this.vacuumPages = Math.max(16, Math.min(65_536, Math.round(this.vacuumPages * Math.min(2, Math.max(0.5, scale)))));
  }

  /** Runs a step; returns how long it took. */
  private timed(work: () => void): number {
    const started = performance.now();
    work();
    const ms = performance.now() - started;
    this.dirtyMs += ms;
    return ms;
  }


  /**
   * The last checkpoint, on the store's own connection: the file shrinks to what
   * incremental_vacuum left, and TRUNCATE hands back the WAL's space. It cannot run in
   * the worker: it takes the write lock, and a write transaction of the store that had
   * already read would then fail with SQLITE_BUSY at once. It must not wait for readers
   * either (the event loop would stall for the busy timeout while a snapshot is open),
   * so the timeout is lifted for it and a busy answer is accepted: the WAL is then
   * truncated by a later run or at shutdown. Few frames are left to copy by now.
   */
  private truncateWal(): void {
    const db = this.host.db;
    const timeout = db.pragma('busy_timeout', { simple: true }) as number;
    db.pragma('busy_timeout = 0');
    try {
      db.pragma('wal_checkpoint(TRUNCATE)');
    } finally {
      db.pragma(`busy_timeout = ${timeout}`);
    }
  }
}
