// @statelog/client: the typed client and the state mirror for workers.
export { StatelogClient } from './client.js';
export type {
  BatchItem,
  BatchResult,
  ChangesOptions,
  ChangesPage,
  ClientOptions,
  CompactResult,
  Consumer,
  ConsumerCommitOptions,
  ConsumerList,
  Entry,
  HistoryOptions,
  HistoryPage,
  IncrOptions,
  LastCompaction,
  LogRecord,
  Snapshot,
  SnapshotOf,
  SnapshotOptions,
  Stats,
  WriteOptions,
  Written,
} from './client.js';
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
