// Store-level fixtures, for any LogStore (test/support/store-access.ts opens one on the
// database under test): writes without HTTP, full reads of the log, snapshots and
// changes, the counters the store keeps, and a compactor driven by hand.
import { Compactor, type CompactionSettings, type CompactorLog } from '../../src/compaction/compactor.js';
import type {
  CompactionBudget,
  LogStore,
  SnapshotReader,
  StoredEntry,
  StoredRecord,
  WriteOp,
  WriteOutcome,
  WriteResult,
} from '../../src/store/log-store.js';

/** A result's outcome (a request without an idempotency key always has one). */
export function outcomeOf(result: WriteResult | undefined): WriteOutcome {
  if (!result || !('outcome' in result)) throw new Error('no outcome: a replay of an answer remembered rendered');
  return result.outcome;
}

/** Commits one request of `ops` at `now` and returns its outcome. */
export async function write(store: LogStore, ops: WriteOp[], now = Date.now()): Promise<WriteOutcome> {
  const [result] = await store.commit([{ ops }], now);
  return outcomeOf(result);
}

/** Every record left in the log after `after`, in offset order, read through the store's change reader. */
export async function allRecords(store: LogStore, pageSize = 10_000, after = 0): Promise<StoredRecord[]> {
  const records: StoredRecord[] = [];
  for (;;) {
    const page = await store.readChanges({ after, prefix: '', limit: pageSize });
    records.push(...page.records);
    if (page.records.length < pageSize) return records;
    after = page.records[page.records.length - 1]!.offset;
  }
}

/** Applies records in order to a key → value-text map: a client catching up. */
export function applyRecords(state: Map<string, string>, records: Iterable<StoredRecord>): Map<string, string> {
  for (const record of records) {
    if (record.op === 'set') state.set(record.key, record.value!);
    else state.delete(record.key);
  }
  return state;
}

/** The next page of a snapshot as entries whose values are JSON text, as the store keeps them. */
export async function snapshotPage(snapshot: SnapshotReader, max: number): Promise<StoredEntry[]> {
  return (await snapshot.nextJson('entry', max)).map((line) => {
    const entry = JSON.parse(line) as { key: string; value: unknown; offset: number; ts: number };
    return { ...entry, value: JSON.stringify(entry.value) };
  });
}

/** A whole snapshot, read page by page: its offset and the live keys at it. */
export async function readSnapshot(store: LogStore, pageSize = 1000): Promise<{ offset: number; state: Map<string, string> }> {
  const snapshot = await store.openSnapshot('');
  try {
    const state = new Map<string, string>();
    for (let page = await snapshotPage(snapshot, pageSize); page.length > 0; page = await snapshotPage(snapshot, pageSize)) {
      for (const entry of page) state.set(entry.key, entry.value);
    }
    return { offset: snapshot.offset, state };
  } finally {
    snapshot.close();
  }
}

/** The current state as the store serves it to readers. */
export async function currentState(store: LogStore): Promise<Map<string, string>> {
  const state = new Map<string, string>();
  let afterKey: string | null = null;
  for (;;) {
    const { items } = await store.list({ prefix: '', afterKey, limit: 1000 });
    for (const item of items) state.set(item.key, item.value);
    if (items.length < 1000) return state;
    afterKey = items[items.length - 1]!.key;
  }
}

/** The counters the store keeps, in the shape of TestStore.counted() (store-access.ts). */
export async function keptCounters(store: LogStore) {
  const counters = await store.counters();
  const backlog = await store.compactionBacklog();
  return {
    records: counters.records,
    liveKeys: counters.liveKeys,
    tombstones: counters.tombstones,
    superseded: backlog.superseded,
  };
}

export const quietLog: CompactorLog = { info() {}, error() {} };

export const NO_TIMER: CompactionSettings = {
  intervalMs: 0,
  minDirtyRatio: 0.5,
  minLagMs: 0,
  maxLagMs: 0,
  tombstoneRetentionMs: 0,
};

/** A compactor on `store` with no timer, for driving runs by hand. */
export function compactorFor(
  store: LogStore,
  settings: Partial<CompactionSettings> = {},
  extra: { now?: () => number; budget?: CompactionBudget; log?: CompactorLog; signal?: AbortSignal } = {},
): Compactor {
  return new Compactor({ ...NO_TIMER, ...settings, store, log: extra.log ?? quietLog, ...extra });
}
