// Opens the store that the configuration names: the embedded SQLite file (default) or a
// PostgreSQL database shared by several statelog nodes.
import type { Config } from '../config.js';
import type { LogStore } from './log-store.js';
import { postgresErrorKinds } from './postgres/errors.js';
import { PgStore } from './postgres/store.js';
import { sqliteErrorKinds } from './sqlite/errors.js';
import { SqliteStore } from './sqlite/store.js';
import { withErrorKinds } from './store-errors.js';

export interface StoreHooks {
  /** Nothing more can be promised durable (a failed fsync): the process must stop. */
  onFatal?: (err: Error) => void;
}

/** The store, throwing StoreErrors of its kinds (store-errors.ts) for what its driver's table knows. */
export async function openStore(config: Config, hooks: StoreHooks = {}): Promise<LogStore> {
  if (config.store === 'postgres') {
    const store = await PgStore.open({
      url: config.databaseUrl!,
      poolSize: config.pgPoolSize,
      queryTimeoutMs: config.pgQueryTimeoutMs,
      durableWaitMs: config.writeTimeoutMs,
      snapshotPoolSize: config.maxSnapshots,
      sync: config.sync,
      idempotencyTtlMs: config.idempotencyTtlMs,
    });
    return withErrorKinds(store, postgresErrorKinds);
  }
  const store = new SqliteStore({
    path: config.dbPath,
    sync: config.sync,
    idempotencyTtlMs: config.idempotencyTtlMs,
    startupCheckMaxBytes: config.startupCheckMaxBytes,
    ...(hooks.onFatal ? { onFatal: hooks.onFatal } : {}),
  });
  return withErrorKinds(store, sqliteErrorKinds);
}

/** The database, for messages: a file path, or a URL without its password. */
export function describeStore(config: Config): string {
  if (config.store === 'sqlite') return config.dbPath;
  const url = new URL(config.databaseUrl!);
  if (url.password) url.password = '***';
  return url.toString();
}
