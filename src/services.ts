// What the routes are given: built once by app.ts and passed explicitly to each
// route plugin, so nothing depends on registration order or decorators.
import type { Config } from './config.js';
import type { ChangeNotifier } from './feed/change-notifier.js';
import type { Metrics } from './metrics.js';
import type { WatcherSlots } from './feed/watcher-slots.js';
import type { LogStore } from './store/log-store.js';
import type { StoreFaults } from './store/unavailable.js';
import type { WriteBatcher } from './writes/write-batcher.js';

export interface Lifecycle {
  /** Set when shutdown begins: readiness fails and long polls and streams end. */
  closing: boolean;
  /** Aborted when shutdown begins. */
  readonly shutdown: AbortSignal;
}

export interface AppServices {
  config: Config;
  store: LogStore;
  batcher: WriteBatcher;
  notifier: ChangeNotifier;
  lifecycle: Lifecycle;
  /** Streams, long polls and snapshots report themselves here (metrics.openStream). */
  metrics: Metrics;
  /** Errors from the database are shown here: a corrupt database fails readiness for good. */
  faults: StoreFaults;
  /** The cap on long polls and change streams open at once. */
  watchers: WatcherSlots;
}
