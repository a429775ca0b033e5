// The connections commits run on. They have no statement timeout: statelog never cancels a
// commit's wait for a synchronous standby (PostgreSQL would keep such a commit, applied on the
// primary alone). A request gets its answer by the write deadline all the same (the batcher's),
// while its connection stays with the commit until the commit resolves: it is never reused before.
import type pg from 'pg';
import { StoreError } from '../store-errors.js';
import { postgresErrorKinds } from './errors.js';

/** Connections a node commits on: one group commits at a time, and the locked path takes another. */
export const WRITE_CONNECTIONS = 2;

// The warning of a commit whose wait for the standby was cancelled or cut (pg_cancel_backend, a
// terminated session): "The transaction has already committed locally, but might not have been
// replicated to the standby."
const NOT_REPLICATED = /synchronous replication|committed locally/i;

export interface WriteConnection {
  client: pg.PoolClient;
  /**
   * Runs the statement that commits: a commit PostgreSQL reports as applied here but perhaps not on
   * the standby, or one whose connection broke before its answer came, has an unknown outcome.
   */
  commits<R>(statement: () => Promise<R>): Promise<R>;
  /** Gives the connection back; `broken`, or a commit whose outcome is unknown, drops it from the pool. */
  release(broken?: Error): void;
}

/** What a session that has not answered is doing, as the database tells another connection. */
export type SessionState = 'waiting_for_standby' | 'running' | 'gone';

/**
 * Asks the database, on another connection, what session `pid` is doing; throws when it cannot be
 * asked (the database out of reach from this node too).
 */
export type SessionCheck = (pid: number) => Promise<SessionState>;

/**
 * Whether a connection that has not answered for a while is to be dropped: not while its session
 * waits for a standby or still runs (dropping it would not resolve the commit, and would pile up
 * sessions), but once the database says it is gone or idle, or cannot be asked (the answer was lost
 * on the way: a network that drops packets answers nothing, not even an error).
 */
export async function unanswered(client: pg.ClientBase, check: SessionCheck): Promise<boolean> {
  const pid = (client as unknown as { processID?: number }).processID;
  if (pid === undefined) return true;
  const state = await check(pid).catch(() => 'gone' as const);
  return state === 'gone';
}

/** Drops a connection that does not answer: its query fails. pg's end() would wait for the answer. */
export function dropConnection(client: pg.ClientBase): void {
  (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
}

/** How often a commit that has not answered is looked at (unanswered()). */
export const STUCK_CHECK_MS = 5000;

export class WriteConnections {
  constructor(
    readonly pool: pg.Pool,
    private readonly check: SessionCheck,
  ) {}

  async connect(): Promise<WriteConnection> {
    const client = await this.pool.connect();
    let warning: string | null = null;
    /** Set by a commit of unknown outcome: the connection is not trusted again. */
    let unknown: Error | undefined;
    const onNotice = (notice: { message?: string; detail?: string }): void => {
      const text = `${notice.message ?? ''} ${notice.detail ?? ''}`;
      if (NOT_REPLICATED.test(text)) warning = notice.message ?? text;
    };
    client.on('notice', onNotice);
    // Any statement of a write, not only its commit, may meet a network that answers nothing.
    const watchdog = setInterval(() => {
      void unanswered(client, this.check).then((lost) => lost && dropConnection(client));
    }, STUCK_CHECK_MS).unref();
    return {
      client,
      commits: async (statement) => {
        warning = null;
        let result;
        try {
          result = await statement();
        } catch (err) {
          if (err instanceof Error && postgresErrorKinds(err) === 'unavailable') throw (unknown = new StoreError('outcome_unknown', err));
          throw err;
        }
        if (warning !== null) throw (unknown = new StoreError('outcome_unknown', new Error(`the commit is not confirmed on a synchronous standby: ${warning}`)));
        return result;
      },
      release: (broken) => {
        clearInterval(watchdog);
        client.off('notice', onNotice);
        client.release(broken ?? unknown);
      },
    };
  }

  end(): Promise<void> {
    return this.pool.end();
  }
}
