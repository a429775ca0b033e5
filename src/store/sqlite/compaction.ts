// One compaction run on the SQLite log, in bounded steps on the writer's connection so
// that group commits interleave; how it paces itself is in docs/design.md (Compaction).
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import type Database from 'better-sqlite3';
import { CompactionRules, lastCommittedBy, runLimits, supersededSinceAfterRun, type ScannedRecord } from '../compaction-rules.js';
import type { CompactionBudget, CompactionPass, CompactionPolicy } from '../log-store.js';
import type { SqliteCheckpointer } from './checkpointer.js';

/** What the run needs from the store that owns the connection and the counters. */
export interface CompactionHost {
  readonly db: Database.Database;
  meta(): { readonly head: number; readonly lastTs: number; readonly records: number; readonly stateKeys: number };
  /** Runs `work` as one transaction; on failure the counters roll back with it. */
  transaction<T>(work: () => T): T;
  /** Inside that transaction: removes records and keys from the counters and raises the horizon. */
  recordRemoval(records: number, keys: number, horizon: number): void;
  setSupersededSince(ts: number | null): void;
  /** Checkpoints off the event loop; null without a file (no WAL). */
  checkpointer(): SqliteCheckpointer | null;
  /** From now on, tells `listener` of every record a write supersedes (one listener at a time). */
  listen(listener: SupersessionListener): void;
  unlisten(listener: SupersessionListener): void;
}

export interface SupersessionListener {
  /** Called inside the write's transaction: `seq` was `key`'s latest record until now. */
  superseded(key: string, seq: number): void;
}

/** Rows a statement examines, at most and at least: chunks are sized from the last rows' cost to end a step near its budget. */
const CHUNK_ROWS = 256;
const MIN_CHUNK_ROWS = 16;
/** The cost of a row before any was measured: the dearer kind, so the first chunk stays short. */
const FIRST_ROW_COST_MS = 0.004;
const COST_WEIGHT = 0.25;
/** Checkpoints are paced by page-writing ms, as each costs two fsyncs whatever it copies: one after 4 ms, waited for past 32 ms. */
const CHECKPOINT_AFTER_MS = 4;
const UNCHECKPOINTED_MS = 32;
const FIRST_VACUUM_PAGES = 256;
// Under load a step is followed by a rest, so that a run takes at most half of the event loop.
const OTHER_WORK_REST_RATIO = 2;
const MAX_REST_MS = 20;
const MAX_REST_BUDGETS = 10;
/** Busy time of the event loop between two steps, other than the step itself, that counts as other work. */
const OTHER_WORK_MS = 0.25;
/** A run this large starts its checkpointer first, so that a thread's start-up does not compete with the steps. */
export const EARLY_CHECKPOINTER_RECORDS = 50_000;
/** Worker checkpoints cannot restart a WAL that writes keep appending to: past this, the run checkpoints the rest itself. */
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
  private dirtyMs = 0;
  /** Started when the first checkpoint is due: a small run needs none before the last. */
  private checkpointer: SqliteCheckpointer | null | undefined;
  private checkpointing: Promise<void> | null = null;
  private checkpointFailure: Error | null = null;
  private autocheckpoint: number | null = null;
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
    this.rules = new CompactionRules(this.cutoff, limits.tombstoneCutTs, limits.tombstoneCutSeq);
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
          // Copied off the event loop first, so that the final checkpoint has (almost) nothing left.
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

  private async start(): Promise<void> {
    this.started = true;
    const { records, stateKeys } = this.host.meta();
    if (records - stateKeys < EARLY_CHECKPOINTER_RECORDS) return;
    await this.startCheckpointer()?.checkpoint();
  }

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

  /** Rests after a step when the event loop did other work since the previous one. */
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

  /** Small, frequent checkpoints in the worker keep the WAL short; when the disk falls behind, the run waits. */
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

  /** Lets the worker catch up, then copies the few frames left here so that the next transaction starts the WAL over. */
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

  /** One removal transaction; its commit blocks the loop too, so the chunks get the budget less the commits' average. */
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
    const scale = ms > 0 ? this.budget.maxMs / ms : 2;
    this.vacuumPages = Math.max(16, Math.min(65_536, Math.round(this.vacuumPages * Math.min(2, Math.max(0.5, scale)))));
  }

  private timed(work: () => void): number {
    const started = performance.now();
    work();
    const ms = performance.now() - started;
    this.dirtyMs += ms;
    return ms;
  }

  /**
   * On the store's connection: in the worker, the write lock would fail a store transaction
   * that had already read. It does not wait for readers; a busy WAL is truncated later.
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
