// The store's own error kinds. Each driver sorts its errors (better-sqlite3's codes,
// PostgreSQL's SQLSTATEs and node-postgres's messages) with a table beside it, and the
// store that openStore() returns throws them as StoreErrors, so nothing above the store
// reads a driver's codes.
import type { LogStore } from './log-store.js';

/**
 * `unavailable`: the database cannot serve now (unreachable, restarting, no connection
 * in time); `no_space`: writes fail for want of room, reads go on; `corrupt`: never a
 * passing outage, the node stays unready until an operator repairs it; `busy`: another
 * process holds the write lock past the busy timeout.
 */
export type StoreErrorKind = 'unavailable' | 'no_space' | 'corrupt' | 'busy';

/** A driver's table: the kind of one error of its own, without looking at causes. */
export type ErrorKinds = (err: Error & { code?: unknown }) => StoreErrorKind | null;

/** The driver's error, sorted; message and code are the driver's, for logs and readiness. */
export class StoreError extends Error {
  readonly code: unknown;

  constructor(
    readonly kind: StoreErrorKind,
    cause: Error,
  ) {
    super(cause.message, { cause });
    this.name = 'StoreError';
    this.code = (cause as { code?: unknown }).code;
  }
}

export function storeErrorKind(err: unknown): StoreErrorKind | null {
  return err instanceof StoreError ? err.kind : null;
}

/** No room to write, as Node reports it from the file system, under either store. */
export const NO_SPACE_CODES: ReadonlySet<unknown> = new Set(['ENOSPC', 'EDQUOT', 'EFBIG']);

/** The error and those it wraps (a cause, the errors of an AggregateError), a few levels deep. */
function* chain(err: unknown, depth = 0): Generator<Error> {
  if (!(err instanceof Error) || depth > 3) return;
  yield err;
  yield* chain(err.cause, depth + 1);
  if (err instanceof AggregateError) for (const inner of err.errors) yield* chain(inner, depth + 1);
}

/**
 * The kind of `err` by a driver's table: corruption wherever it shows; else the error's
 * own kind; else any kind found in what it wraps makes the store unavailable.
 */
export function kindOf(err: unknown, kinds: ErrorKinds): StoreErrorKind | null {
  const found = [...chain(err)].map((e) => kinds(e));
  if (found.includes('corrupt')) return 'corrupt';
  return found[0] ?? (found.some((kind) => kind !== null) ? 'unavailable' : null);
}

/** `err` as a StoreError when the table knows it; anything else (a bug, a refused statement) as it is. */
export function translate(err: unknown, kinds: ErrorKinds): unknown {
  if (err instanceof StoreError) return err;
  const kind = kindOf(err, kinds);
  return kind === null ? err : new StoreError(kind, err as Error);
}

/** The methods whose failures are translated, and those whose results are objects to translate too. */
const TRANSLATED: ReadonlySet<PropertyKey> = new Set<keyof LogStore>([
  'readPosition', 'get', 'list', 'commit', 'readChanges', 'history', 'counters', 'ping',
  'compactionBacklog', 'purgeIdempotency', 'dueExpiries', 'close',
]);
const OPENING: ReadonlySet<PropertyKey> = new Set<keyof LogStore>(['openSnapshot', 'startCompaction']);
/** A snapshot's and a compaction run's methods. */
const INNER: ReadonlySet<PropertyKey> = new Set(['nextJson', 'nextChunk', 'step']);

/**
 * The store with its errors translated by `kinds`. A proxy rather than a wrapper class,
 * so that the store is still what it is to whoever holds it (its class, its fields);
 * the methods run on the store itself, so its own accesses cost nothing more.
 */
export function withErrorKinds<T extends object>(target: T, kinds: ErrorKinds, methods = TRANSLATED, opening = OPENING): T {
  // By the method itself, not its name: a method replaced on the store (a test's spy) is wrapped anew.
  const wrapped = new WeakMap<object, unknown>();
  const fail = (err: unknown): never => {
    throw translate(err, kinds);
  };
  const wrap = (method: (...args: unknown[]) => unknown, opens: boolean) =>
    (...args: unknown[]): unknown => {
      let result: unknown;
      try {
        result = method.apply(target, args);
      } catch (err) {
        fail(err);
      }
      if (!(result instanceof Promise)) return result;
      return opens ? result.then((opened: object) => withErrorKinds(opened, kinds, INNER, new Set()), fail) : result.catch(fail);
    };
  return new Proxy(target, {
    get(object, property) {
      const value: unknown = Reflect.get(object, property, object);
      if (typeof value !== 'function' || !(methods.has(property) || opening.has(property))) return value;
      if (!wrapped.has(value)) wrapped.set(value, wrap(value as (...args: unknown[]) => unknown, opening.has(property)));
      return wrapped.get(value);
    },
  });
}

/**
 * Whether writes fail for want of space, as both stores follow it: a write that fails
 * so is remembered, and readiness fails until a write commits again, one of the
 * clients' or the store's own probe, which readiness runs while the failure stands.
 * Nothing is reset by a timer: the node is ready again once space has returned.
 */
export class WriteRoom {
  private failure: Error | null = null;
  /** The probe running, shared by readiness checks that arrive meanwhile (each would write). */
  private probing: Promise<void> | null = null;

  constructor(private readonly kinds: ErrorKinds) {}

  /** A write failed: remembered when it was for want of space. */
  failed(err: unknown): void {
    if (err instanceof Error && this.kinds(err) === 'no_space') this.failure = err;
  }

  /** A write committed: there is room again. */
  committed(): void {
    this.failure = null;
  }

  /**
   * For readiness: resolves when no write failed for want of space, or when `probe` (a
   * write of the store's own, given the failure to throw) now commits; throws otherwise.
   */
  check(probe: (failure: Error) => unknown): Promise<void> {
    const failure = this.failure;
    if (!failure) return Promise.resolve();
    this.probing ??= this.runProbe(probe, failure).finally(() => (this.probing = null));
    return this.probing;
  }

  private async runProbe(probe: (failure: Error) => unknown, failure: Error): Promise<void> {
    try {
      await probe(failure);
    } catch (err) {
      this.failed(err);
      throw err;
    }
    this.committed();
  }
}

/** A corrupt database, once seen: readiness fails with this reason from then on. */
export class StoreFaults {
  private corruption: string | null = null;

  /** Why the database is known to be corrupt, or null. */
  get corrupt(): string | null {
    return this.corruption;
  }

  /** Takes note of an error from the store; true when it shows corruption. */
  observe(err: unknown): boolean {
    if (storeErrorKind(err) !== 'corrupt') return false;
    this.corruption ??= (err as Error).message;
    return true;
  }
}
