// The store's own error kinds: each driver sorts its errors with a table beside it, so nothing
// above the store reads a driver's codes.
import type { LogStore } from './log-store.js';

// unavailable: cannot serve now; no_space: writes fail, reads go on; corrupt: never a passing
// outage, unready until repaired; busy: another process held the write lock past the timeout;
// outcome_unknown: a commit was sent but its durability was not confirmed (it may be applied).
export type StoreErrorKind = 'unavailable' | 'no_space' | 'corrupt' | 'busy' | 'outcome_unknown';

/** A driver's table: the kind of one error of its own, without looking at causes. */
export type ErrorKinds = (err: Error & { code?: unknown }) => StoreErrorKind | null;

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

export const NO_SPACE_CODES: ReadonlySet<unknown> = new Set(['ENOSPC', 'EDQUOT', 'EFBIG']);

/** The error and those it wraps (a cause, the errors of an AggregateError), a few levels deep. */
function* chain(err: unknown, depth = 0): Generator<Error> {
  if (!(err instanceof Error) || depth > 3) return;
  yield err;
  yield* chain(err.cause, depth + 1);
  if (err instanceof AggregateError) for (const inner of err.errors) yield* chain(inner, depth + 1);
}

/** Corruption wherever it shows; else the error's own kind; else any kind in what it wraps means unavailable. */
export function kindOf(err: unknown, kinds: ErrorKinds): StoreErrorKind | null {
  const found = [...chain(err)].map((e) => kinds(e));
  if (found.includes('corrupt')) return 'corrupt';
  return found[0] ?? (found.some((kind) => kind !== null) ? 'unavailable' : null);
}

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
const INNER: ReadonlySet<PropertyKey> = new Set(['nextJson', 'nextChunk', 'step']);

/** The store with its errors translated: a proxy, so that it stays what it is to its holders, at no cost to its own calls. */
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

// Whether writes fail for want of space, for both stores: readiness fails from such a failure until a
// write commits, a client's or the store's own probe. No timer resets it.
export class WriteRoom {
  private failure: Error | null = null;
  /** The probe running, shared by readiness checks that arrive meanwhile (each would write). */
  private probing: Promise<void> | null = null;

  constructor(private readonly kinds: ErrorKinds) {}

  /** A write failed for want of space, and none has committed since. */
  get failing(): boolean {
    return this.failure !== null;
  }

  failed(err: unknown): void {
    if (err instanceof Error && this.kinds(err) === 'no_space') this.failure = err;
  }

  committed(): void {
    this.failure = null;
  }

  /** For readiness: resolves with no failure standing or once `probe` (the store's own write) commits; throws otherwise. */
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

  get corrupt(): string | null {
    return this.corruption;
  }

  observe(err: unknown): boolean {
    if (storeErrorKind(err) !== 'corrupt') return false;
    this.corruption ??= (err as Error).message;
    return true;
  }
}
