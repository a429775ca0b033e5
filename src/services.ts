// The services behind the routes, opened, started and closed here; routes are given what they use
// explicitly, so nothing depends on registration order or decorators.
import { setMaxListeners } from 'node:events';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, resolve } from 'node:path';
import { Compactor, compactionSettings, type CompactorLog } from './compaction/compactor.js';
import { ConsumerHolds, type HoldsLog } from './consumers/holds.js';
import { Expirer } from './writes/expirer.js';
import type { Config } from './config.js';
import { ChangeNotifier } from './feed/change-notifier.js';
import { ReadTurns } from './feed/read-turns.js';
import { TailWindow } from './feed/tail-window.js';
import { SharedSnapshots } from './snapshot/shared-snapshots.js';
import { SpoolBudget } from './snapshot/spool-budget.js';
import type { Lifecycle } from './http/lifecycle.js';
import { WatcherSlots } from './feed/watcher-slots.js';
import { SharedPagesBudget } from './feed/tail-pages.js';
import { Metrics } from './metrics.js';
import type { LogStore } from './store/log-store.js';
import { describeStore, openStore } from './store/open-store.js';
import { StoreFaults } from './store/store-errors.js';
import { WriteBatcher } from './writes/write-batcher.js';
import { OutageLog } from './outage-log.js';

export interface Services {
  config: Config;
  store: LogStore;
  batcher: WriteBatcher;
  notifier: ChangeNotifier;
  lifecycle: Lifecycle;
  metrics: Metrics;
  watchers: WatcherSlots;
  /** The memory of the pages kept at the head, shared by the changes and stream routes. */
  sharedPages: SharedPagesBudget;
  readTurns: ReadTurns;
  /** The newest records in memory, for the readers at the head. */
  tailWindow: TailWindow;
  /** Errors from the database are shown here: a corrupt database fails readiness for good. */
  faults: StoreFaults;
  snapshots: SharedSnapshots;
  compactor: Compactor;
  expirer: Expirer;
  holds: ConsumerHolds;
  /** Starts the work of the process's own: the compactor, the expirer and the purge of expired idempotency answers. */
  start(): void;
  beginShutdown(): void;
  close(): Promise<void>;
}

export interface ServicesLog {
  error(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  fatal(fields: object, message: string): void;
  child(bindings: Record<string, unknown>): CompactorLog & HoldsLog;
}

export class StartupError extends Error {
  constructor(step: string, cause: unknown) {
    super(`${step}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StartupError';
  }
}

export interface ServicesOptions {
  /** A failed fsync: nothing more can be promised durable, so the process must stop (by default: no more writes served). */
  onFatal?: (err: Error) => void;
  /** Opens the store; by default the one the configuration names (store/open-store.ts). */
  openStore?: typeof openStore;
}

export async function openServices(config: Config, log: ServicesLog, options: ServicesOptions = {}): Promise<Services> {
  let store: LogStore;
  try {
    store = await (options.openStore ?? openStore)(config, {
      onFatal: (err) => {
        log.fatal({ err }, 'an fsync failed: nothing more can be promised durable; the process stops');
        options.onFatal?.(err);
      },
    });
  } catch (err) {
    throw new StartupError(`cannot open the database ${describeStore(config)}`, err);
  }
  // From here on, a failure closes what was opened before it is thrown.
  const undo: (() => unknown)[] = [() => store.close()];
  try {
    const notifier = new ChangeNotifier();
    notifier.publish(store.position().head);
    const metrics = new Metrics(store);
    const batcher = new WriteBatcher(store, {
      onCommit: (head, records) => {
        notifier.publish(head);
        metrics.recordsWritten(records);
      },
      onDurable: (elapsedMs) => metrics.groupCommitted(elapsedMs),
      deadlineMs: config.writeTimeoutMs,
    });
    undo.unshift(() => batcher.drain());

    const shutdown = new AbortController();
    // Every open stream and long poll listens for shutdown: no leak at any count.
    setMaxListeners(0, shutdown.signal);
    const lifecycle: Lifecycle = { closing: false, shutdown: shutdown.signal };
    const beginShutdown = () => {
      lifecycle.closing = true;
      shutdown.abort();
    };

    // A database out of reach fails every timer's work: said once per cause per interval.
    const outage = new OutageLog(log, (cause) => metrics.outageError(cause));
    // Checked every second: a query of the held consumers, usually none.
    const consumersLog = log.child({ module: 'consumers' });
    const holds = new ConsumerHolds(
      store,
      { maxRecords: config.consumerHoldMaxRecords, maxMs: config.consumerHoldMaxMs },
      { warn: (fields, message) => consumersLog.warn(fields, message), error: (fields, message) => outage.error({ module: 'consumers', ...fields }, message) },
      1000,
    );
    undo.unshift(() => holds.stop());
    metrics.watchConsumerHolds(() => holds.released);
    const compactor = new Compactor({
      ...compactionSettings(config),
      store,
      log: log.child({ module: 'compactor' }),
      signal: shutdown.signal,
      holdFloor: () => holds.floor(),
    });
    undo.unshift(() => compactor.stop());
    metrics.watchCompaction(() => ({
      runs: compactor.runs,
      failures: compactor.failures,
      removed: compactor.removed,
      tombstonesRemoved: compactor.tombstonesRemoved,
      lastDurationMs: compactor.lastCompaction?.durationMs ?? 0,
      totalDurationMs: compactor.durationMsTotal,
      lastSuccessMs: compactor.lastCompaction && compactor.lastCompaction.startedAt + compactor.lastCompaction.durationMs,
    }));

    // Stopped before the batcher drains: its deletes go through the batcher.
    const expirer = new Expirer({ store, batcher, log: { error: (fields, message) => outage.error({ module: 'expirer', ...fields }, message) }, periodMs: config.expiryIntervalMs });
    undo.unshift(() => expirer.stop());

    // Commits of other nodes sharing the database wake this node's readers too.
    const unwatch = store.watchHead(
      (head) => notifier.publish(head),
      (err) => outage.warn({ err }, "watching the database for other nodes' commits was interrupted; it resumes by itself"),
    );
    undo.unshift(unwatch);

    // Made now, so that a spool folder that cannot be made stops the start, not the first snapshot.
    const spoolDir = config.spoolDir ?? (config.store === 'sqlite' ? dirname(resolve(config.dbPath)) : tmpdir());
    mkdirSync(spoolDir, { recursive: true });
    const snapshots = new SharedSnapshots(store, {
      maxReads: config.maxSnapshots,
      dir: spoolDir,
      budget: new SpoolBudget(config.spoolMaxBytes),
      keepMs: config.snapshotMaxAgeSeconds * 1000,
      signal: shutdown.signal,
      onRead: () => metrics.snapshotRead(),
    });

    let purge: NodeJS.Timeout | undefined;
    undo.unshift(() => clearInterval(purge));
    const start = () => {
      compactor.start();
      expirer.start();
      holds.start();
      purge = setInterval(
        () => void store.purgeIdempotency(Date.now()).catch((err) => outage.error({ err }, 'idempotency purge failed')),
        Math.min(config.idempotencyTtlMs, 60_000),
      ).unref();
    };

    let closed: Promise<void> | undefined;
    const readTurns = new ReadTurns();
    const tailWindow = new TailWindow(store, readTurns, { onRead: (from) => metrics.feedRead(from) });
    // The database may have changed under this node (a failover): nothing it kept of the log is
    // served again, and every waiting reader looks again, to be checked against the log as it is.
    const unwatchRewind = store.watchRewind?.((position) => {
      metrics.rewound();
      tailWindow.rewind(position);
      snapshots.rewind();
      notifier.rewind(position.head);
    });
    if (unwatchRewind) undo.unshift(unwatchRewind);
    return {
      config,
      store,
      batcher,
      notifier,
      lifecycle,
      metrics,
      watchers: new WatcherSlots(config.maxWatchers),
      sharedPages: new SharedPagesBudget(config.sharedPagesMaxBytes, {
        onBytes: (bytes) => metrics.sharedPagesBytes(bytes),
        onEvict: () => metrics.sharedPageEvicted(),
      }),
      readTurns,
      tailWindow,
      faults: new StoreFaults(),
      snapshots,
      compactor,
      expirer,
      holds,
      start,
      beginShutdown,
      close() {
        beginShutdown();
        closed ??= runInOrder(undo);
        return closed;
      },
    };
  } catch (err) {
    await runInOrder(undo).catch(() => {});
    throw new StartupError('cannot start the services', err);
  }
}

/** Runs each step, one after another; the first failure is thrown once all have run. */
async function runInOrder(steps: (() => unknown)[]): Promise<void> {
  let failure: unknown;
  for (const step of steps) {
    try {
      await step();
    } catch (err) {
      failure ??= err;
    }
  }
  if (failure !== undefined) throw failure;
}
