// Whether this node can commit a write now, known without waiting: a probe on a connection of
// its own commits a transaction that writes WAL (a logical message, which touches no table) every
// PROBE_EVERY_MS, so that its commit waits for a synchronous standby as a write's does. /readyz answers from what the probe last found, or from
// how long the probe under way has been stuck, within milliseconds whatever the database does.
// The probe never cancels itself: a commit waiting for a standby is left to resolve.
import pg from 'pg';
import type { StoreReadiness } from '../log-store.js';
import { storeErrorKind, translate } from '../store-errors.js';
import { postgresErrorKinds } from './errors.js';
import { dropConnection, unanswered, type SessionCheck } from './write-connections.js';

export const PROBE_EVERY_MS = 500;
/** A probe still unanswered after this means the node cannot commit now. */
export const PROBE_STALLED_MS = 1000;
/**
 * A probe unanswered this long is given up, unless the database says its session is waiting for a
 * synchronous standby (then it is left to resolve, so that an outage of the standbys does not pile
 * up sessions): a network that drops packets answers nothing, not even an error.
 */
export const PROBE_ABANDON_MS = 3000;

// An xid alone is not enough: PostgreSQL makes a commit wait for the standby only when the
// transaction wrote WAL.
const PROBE_SQL = `SELECT pg_is_in_recovery() AS standby,
  CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_logical_emit_message(true, 'statelog', 'readiness') END AS lsn`;

type Step = 'connect' | 'commit' | 'room';

const STALLED: Record<Step, StoreReadiness> = {
  connect: { ready: false, reason: 'database_unreachable', message: 'no connection to the database could be made' },
  commit: { ready: false, reason: 'commits_not_completing', message: 'commits are not completing (a synchronous standby does not confirm them?)' },
  room: { ready: false, reason: 'no_space', message: 'writes fail: the database has no room to write' },
};

export class ReadinessProbe {
  private verdict: StoreReadiness = { ready: false, reason: 'database_unreachable', message: 'the database was not checked yet' };
  private client: pg.Client | null = null;
  private step: Step | null = null;
  private stepStarted = 0;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly config: pg.ClientConfig,
    /** The store's own check of room to write (WriteRoom.check with its probe write). */
    private readonly checkRoom: () => Promise<void>,
    private readonly check: SessionCheck,
  ) {}

  /** Resolves once the first probe has answered. */
  async start(): Promise<void> {
    await this.run();
    this.timer = setInterval(() => {
      if (this.step === null) void this.run();
      else if (performance.now() - this.stepStarted > PROBE_ABANDON_MS) void this.abandonUnlessWaiting();
    }, PROBE_EVERY_MS).unref();
  }

  current(): StoreReadiness {
    if (this.step !== null && performance.now() - this.stepStarted > PROBE_STALLED_MS) return STALLED[this.step];
    return this.verdict;
  }

  private enter(step: Step): void {
    this.step = step;
    this.stepStarted = performance.now();
  }

  private async run(): Promise<void> {
    try {
      this.enter('connect');
      const client = this.client ?? (await this.connect());
      this.enter('commit');
      const { rows } = await client.query<{ standby: boolean }>(PROBE_SQL);
      if (rows[0]!.standby) {
        this.verdict = { ready: false, reason: 'read_only', message: 'the database is a read-only standby: writes cannot commit there' };
        return;
      }
      this.enter('room');
      await this.checkRoom();
      this.verdict = { ready: true };
    } catch (err) {
      const kind = storeErrorKind(translate(err, postgresErrorKinds));
      const message = `the database cannot be used: ${(err as Error).message}`;
      this.verdict = kind === 'no_space' ? STALLED.room : { ready: false, reason: 'database_unreachable', message };
      const client = this.client;
      this.client = null;
      await client?.end().catch(() => {});
    } finally {
      this.step = null;
    }
  }

  private checking = false;

  private async abandonUnlessWaiting(): Promise<void> {
    const client = this.client;
    if (this.checking || !client) return;
    this.checking = true;
    const lost = await unanswered(client, this.check);
    this.checking = false;
    if (!lost) return;
    // The next tick probes afresh.
    this.client = null;
    this.stepStarted = performance.now();
    dropConnection(client);
  }

  private async connect(): Promise<pg.Client> {
    const client = new pg.Client(this.config);
    // A break surfaces as the next probe's failure.
    client.on('error', () => {});
    try {
      await client.connect();
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    if (this.closed) await client.end().catch(() => {});
    else this.client = client;
    return client;
  }

  async stop(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    const client = this.client;
    this.client = null;
    // A probe stuck in a commit is not waited for.
    void client?.end().catch(() => {});
  }
}
