// The compaction job: a timer that starts a run when the counters say it is due, or a run on
// demand, driven step by step with the event loop between; a failed run is retried next period.
import type { Config } from '../config.js';
import type { CompactionBacklog, CompactionBudget, CompactionPass, LogStore } from '../store/log-store.js';

export type CompactionTrigger = 'dirty_ratio' | 'max_lag' | 'admin';

export interface CompactionSettings {
  intervalMs: number;
  minDirtyRatio: number;
  minLagMs: number;
  maxLagMs: number;
  tombstoneRetentionMs: number;
}

export function compactionSettings(config: Config): CompactionSettings {
  return {
    intervalMs: config.compactIntervalMs,
    minDirtyRatio: config.minDirtyRatio,
    minLagMs: config.minCompactionLagMs,
    maxLagMs: config.maxCompactionLagMs,
    tombstoneRetentionMs: config.tombstoneRetentionMs,
  };
}

/** What a completed run did; `lastCompaction` in GET /v1/stats. */
export interface CompactionSummary {
  trigger: CompactionTrigger;
  startedAt: number;
  durationMs: number;
  removed: number;
  tombstonesRemoved: number;
  horizon: number;
  head: number;
  bytesBefore: number;
  bytesAfter: number;
}

export interface CompactorLog {
  info(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

export interface CompactorOptions extends CompactionSettings {
  store: LogStore;
  log: CompactorLog;
  now?: () => number;
  budget?: CompactionBudget;
  signal?: AbortSignal;
  /** The offset above which a run keeps delete markers (consumers' holds); null: none. */
  holdFloor?: () => Promise<number | null>;
}

/** A run ended early, at a step boundary, because the compactor was stopped. */
export class CompactionStopped extends Error {
  constructor() {
    super('the compactor stopped');
    this.name = 'CompactionStopped';
  }
}

// A step is one blocking transaction on the writer's connection: a write arriving meanwhile waits
// for it, so its length adds to the writes' tail latency; shorter steps cost the run more commits.
export const DEFAULT_BUDGET: CompactionBudget = { maxRows: 20_000, maxMs: 1 };

// Why a timed run is due, or null: until the superseding record is older than the minimum lag a run
// removes nothing; the maximum lag counts from the superseding, as Kafka's max.compaction.lag.ms.
export function compactionDue(backlog: CompactionBacklog, settings: CompactionSettings, now: number): CompactionTrigger | null {
  const since = backlog.supersededSince;
  if (backlog.superseded <= 0 || since === null || now - since < settings.minLagMs) return null;
  if (backlog.superseded / backlog.records >= settings.minDirtyRatio) return 'dirty_ratio';
  if (settings.maxLagMs > 0 && now - since >= settings.maxLagMs) return 'max_lag';
  return null;
}

/** Two hops through the check phase: the group commit scheduled with setImmediate runs before the next step. */
function yieldToWriters(): Promise<void> {
  return new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;

export class Compactor {
  private readonly store: LogStore;
  private readonly log: CompactorLog;
  private readonly settings: CompactionSettings;
  private readonly now: () => number;
  private readonly budget: CompactionBudget;
  private readonly holdFloor: () => Promise<number | null>;
  private timer: NodeJS.Timeout | null = null;
  private current: Promise<CompactionSummary> | null = null;
  private stopped = false;
  private last: CompactionSummary | null = null;
  private totals = { runs: 0, failures: 0, removed: 0, tombstonesRemoved: 0, durationMs: 0 };

  constructor(options: CompactorOptions) {
    const { store, log, now, budget, signal, holdFloor, ...settings } = options;
    this.holdFloor = holdFloor ?? (async () => null);
    this.store = store;
    this.log = log;
    this.settings = settings;
    this.now = now ?? Date.now;
    this.budget = budget ?? DEFAULT_BUDGET;
    signal?.addEventListener('abort', () => void this.stop(), { once: true });
  }

  get runs(): number {
    return this.totals.runs;
  }
  get failures(): number {
    return this.totals.failures;
  }
  get removed(): number {
    return this.totals.removed;
  }
  get tombstonesRemoved(): number {
    return this.totals.tombstonesRemoved;
  }
  /** Total duration of the completed runs; with `runs`, a Prometheus summary. */
  get durationMsTotal(): number {
    return this.totals.durationMs;
  }
  get lastCompaction(): CompactionSummary | null {
    return this.last;
  }
  get running(): boolean {
    return this.current !== null;
  }

  start(): void {
    if (this.settings.intervalMs === 0 || this.stopped || this.timer) return;
    this.timer = setTimeout(() => {
      void this.tick().finally(() => {
        this.timer = null;
        this.start();
      });
    }, this.settings.intervalMs).unref();
  }

  /** A run if one is due; never throws. */
  async tick(): Promise<CompactionSummary | null> {
    if (this.current || this.stopped) return null;
    let trigger: CompactionTrigger | null;
    try {
      trigger = compactionDue(await this.store.compactionBacklog(), this.settings, this.now());
    } catch (err) {
      this.totals.failures += 1;
      this.log.error({ err }, 'compaction check failed; it is retried at the next period');
      return null;
    }
    if (!trigger) return null;
    try {
      return await this.run(trigger);
    } catch {
      return null; // logged and counted by run()
    }
  }

  /** Runs a compaction now, whatever the dirty ratio; a call during a run joins it. */
  run(trigger: CompactionTrigger = 'admin'): Promise<CompactionSummary> {
    if (this.stopped) return Promise.reject(new CompactionStopped());
    this.current ??= this.execute(trigger).finally(() => {
      this.current = null;
    });
    return this.current;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.current?.catch(() => {});
  }

  private async execute(trigger: CompactionTrigger): Promise<CompactionSummary> {
    const startedAt = this.now();
    const started = performance.now();
    let pass: CompactionPass | undefined;
    try {
      const { dbBytes: bytesBefore } = await this.store.counters();
      // Fixed when the run starts, as its cutoff is.
      const keepTombstonesAbove = await this.holdFloor();
      pass = await this.store.startCompaction(
        { now: startedAt, minLagMs: this.settings.minLagMs, tombstoneRetentionMs: this.settings.tombstoneRetentionMs, keepTombstonesAbove },
        this.budget,
      );
      while (await pass.step()) {
        if (this.stopped) throw new CompactionStopped();
        await yieldToWriters();
      }
      const after = await this.store.counters();
      return this.completed({
        trigger,
        startedAt,
        durationMs: round(performance.now() - started),
        removed: pass.removed,
        tombstonesRemoved: pass.tombstonesRemoved,
        horizon: after.horizon,
        head: after.head,
        bytesBefore,
        bytesAfter: after.dbBytes,
      });
    } catch (err) {
      const done = { trigger, removed: pass?.removed ?? 0, tombstonesRemoved: pass?.tombstonesRemoved ?? 0 };
      this.totals.removed += done.removed;
      this.totals.tombstonesRemoved += done.tombstonesRemoved;
      if (err instanceof CompactionStopped) {
        this.log.info(done, 'compaction stopped at a step boundary');
      } else {
        this.totals.failures += 1;
        this.log.error({ ...done, err }, 'compaction failed; its completed steps stand, and it is retried at the next period');
      }
      throw err;
    } finally {
      pass?.close();
    }
  }

  private completed(summary: CompactionSummary): CompactionSummary {
    this.totals.runs += 1;
    this.totals.removed += summary.removed;
    this.totals.tombstonesRemoved += summary.tombstonesRemoved;
    this.totals.durationMs += summary.durationMs;
    this.last = summary;
    this.log.info(summary, 'compaction finished');
    return summary;
  }
}
