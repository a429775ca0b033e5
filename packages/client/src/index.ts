// @statelog/client: the typed client and the state mirror for workers.
export { StatelogClient } from './client.js';
export type { BatchItem, BatchResult, CompactResult, HistoryOptions, HistoryPage, IncrOptions, LastCompaction, WriteOptions, Written } from './client.js';
export type { Consumer, ConsumerCommitOptions, ConsumerList } from './consumers.js';
export type { ChangesOptions, ChangesPage, ClientOptions, Entry, LogRecord, Snapshot, SnapshotOf, SnapshotOptions, Stats } from './pages.js';
export { CutStreamError, StatelogError, isStatelogError, type ConnectionErrorCode, type ErrorCode } from './errors.js';
export type { RetryPolicy } from './retry.js';
export { readEvents, type SseEvent } from './sse.js';
export {
  DigestMismatchError,
  StateMirror,
  type DigestCheck,
  type ResetEvent,
  type RetryEvent,
  type StateMirrorEvents,
  type StateMirrorOptions,
} from './state-mirror.js';
export type { ConsumerOption, WatchEvent, WatchOptions } from './watch.js';
