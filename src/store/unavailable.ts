// Errors that mean the database cannot be used right now (unreachable, restarting, the
// connection dropped, no connection to be had in time, SQLite's write lock held by another
// process past the busy timeout), as opposed to a bug or a statement the database
// refused: the request may be retried later, so it is answered 503 `unavailable` with
// Retry-After, not 500. The store itself recovers by itself: broken connections leave the
// pool and new ones are made on demand.

/** Socket errors on the way to the database (Node's codes). */
const NETWORK_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** PostgreSQL SQLSTATEs of a server that cannot serve now; class 08 is matched whole. */
const SERVER_STATES: ReadonlySet<string> = new Set([
  '57P01', // admin_shutdown: the server is stopping, or pg_terminate_backend()
  '57P02', // crash_shutdown: another backend crashed
  '57P03', // cannot_connect_now: starting up or in recovery
  '53300', // too_many_connections
  '25006', // read_only_sql_transaction: connected to a standby during a failover
]);

/**
 * node-postgres reports a dropped connection, a connection timeout (its own, and the
 * pool's wait for a connection) and a client that a broken connection left unusable
 * without a code, in these messages.
 */
const DRIVER_MESSAGES =
  /^(Connection terminated|timeout expired$|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed and is not queryable|Query read timeout)/;

export function isStoreUnavailable(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 3) return false;
  if (isStoreFull(err)) return true;
  const code = (err as { code?: unknown }).code;
  if (
    typeof code === 'string' &&
    (NETWORK_CODES.has(code) || SERVER_STATES.has(code) || /^08[0-9A-Z]{3}$/.test(code) || code.startsWith('SQLITE_BUSY'))
  ) {
    return true;
  }
  if (DRIVER_MESSAGES.test(err.message)) return true;
  // A connection attempt to several addresses fails with an AggregateError of each.
  const inner = [err.cause, ...(err instanceof AggregateError ? err.errors : [])];
  return inner.some((cause) => isStoreUnavailable(cause, depth + 1));
}

/**
 * No room to write: SQLite's SQLITE_FULL (the disk, or a file-size limit), an ENOSPC
 * from Node, PostgreSQL's disk_full. Writes fail until space returns, by itself or by
 * an operator's hand; reads go on. Answered 503 `unavailable` with Retry-After.
 */
export function isStoreFull(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_FULL' || code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG' || code === '53100';
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

  /** A write failed: remembered when it was for want of space. */
  failed(err: unknown): void {
    if (isStoreFull(err)) this.failure = err as Error;
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

/**
 * A corrupt database: SQLite's SQLITE_CORRUPT (and its extended codes) and
 * SQLITE_NOTADB, PostgreSQL's data_corrupted and index_corrupted. Never a passing
 * outage: answered 500, and the node stays unready until an operator repairs the file.
 */
export function isStoreCorrupt(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 3) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB' || code === 'XX001' || code === 'XX002')) {
    return true;
  }
  return isStoreCorrupt(err.cause, depth + 1);
}

/** A corrupt database, once seen: readiness fails with this reason from then on. */
export class StoreFaults {
  private corruption: string | null = null;

  /** Why the database is known to be corrupt, or null. */
  get corrupt(): string | null {
    return this.corruption;
  }

  /** Takes note of an error from the database; true when it shows corruption. */
  observe(err: unknown): boolean {
    if (!isStoreCorrupt(err)) return false;
    this.corruption ??= (err as Error).message;
    return true;
  }
}
