// Fixtures of the PostgreSQL tests: stores on throw-away databases, statelog nodes in
// child processes, and a reader that follows the log as a client of /v1/changes does.
// Writes without HTTP and reads of the whole log are those of any store (store-helpers.ts).
import pg from 'pg';
import type { StoredRecord } from '../../src/store/log-store.js';
import { PgStore, type PgStoreOptions } from '../../src/store/postgres/store.js';
import { createTestDatabase, type TestDatabase, type TestDatabaseOptions } from '../../harness/pg-database.js';
import { spawnServer, type UrlServer } from '../support/child-server.js';

/**
 * Settings for a spawned node that turn load shedding off: on a busy machine (shared by
 * several test runs), a 503 for an event-loop delay is not what a test looks at.
 */
export const NO_SHEDDING = { STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' };

export interface Fixture {
  db: TestDatabase;
  open(options?: Partial<PgStoreOptions>): Promise<PgStore>;
  /** A plain connection to the test database, closed by cleanup(). */
  connect(): Promise<pg.Client>;
  /** A statelog node on the test database. */
  spawn(env?: Record<string, string>): Promise<UrlServer>;
  cleanup(): Promise<void>;
}

export async function fixture(options: TestDatabaseOptions = {}): Promise<Fixture> {
  const db = await createTestDatabase(options);
  const stores: PgStore[] = [];
  const servers: UrlServer[] = [];
  const clients: pg.Client[] = [];
  return {
    db,
    async open(options = {}) {
      const store = await PgStore.open({
        url: db.url,
        poolSize: 4,
        snapshotPoolSize: 2,
        sync: 'full',
        idempotencyTtlMs: 60_000,
        ...options,
      });
      stores.push(store);
      return store;
    },
    async connect() {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      clients.push(client);
      return client;
    },
    async spawn(env = {}) {
      const server = await spawnServer({
        STATELOG_STORE: 'postgres',
        DATABASE_URL: db.url,
        STATELOG_PG_POOL_SIZE: '4',
        STATELOG_COMPACT_INTERVAL_MS: '0',
        ...env,
      });
      servers.push(server);
      return server;
    },
    async cleanup() {
      for (const server of servers) server.proc.kill('SIGKILL');
      await Promise.all(stores.map((store) => store.close()));
      await Promise.all(clients.map((client) => client.end().catch(() => {})));
      await db.drop();
    },
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One HTTP request; the body parsed as JSON. */
export async function http(url: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as any, headers: res.headers };
}

/** What a follower reads: a page after an offset, with the head read in the same snapshot. */
export type ReadPage = (after: number, limit: number) => Promise<{ records: StoredRecord[]; head: number }>;

/**
 * Follows the log from offset 0 as a /v1/changes client does: reads a page, continues
 * from the last record when the page is full and from the head read with it otherwise,
 * and between empty reads waits for `wake` (the store's head watch) or a short timeout.
 * Returns once it has reached `stopAt()` (null while writers still run).
 */
export async function follow(
  read: ReadPage,
  stopAt: () => number | null,
  wake: (listener: () => void) => () => void = () => () => {},
  pageSize = 500,
): Promise<StoredRecord[]> {
  const seen: StoredRecord[] = [];
  let after = 0;
  let resume: (() => void) | null = null;
  const unwatch = wake(() => resume?.());
  try {
    for (;;) {
      const page = await read(after, pageSize);
      seen.push(...page.records);
      const full = page.records.length === pageSize;
      after = full ? page.records[page.records.length - 1]!.offset : page.head;
      if (full) continue;
      const end = stopAt();
      if (end !== null && after >= end) return seen;
      // The timeout only bounds a wait that a lost wake-up would make long.
      await Promise.race([new Promise<void>((resolve) => (resume = resolve)), sleep(100)]);
      resume = null;
    }
  } finally {
    unwatch();
  }
}

export interface FollowReport {
  /** Acknowledged writes that a reader never saw (summed over readers). */
  missing: number;
  /** Records a reader saw more than once, or out of offset order. */
  repeatedOrUnordered: number;
  /** Readers whose sequence differs from the first reader's. */
  disagreeing: number;
}

/**
 * Checks what readers saw against the acknowledged writes: each reader must see every
 * acknowledged write once, at its offset, with its value, and all in the same order.
 */
export function checkFollowers(readers: StoredRecord[][], acked: { offset: number; key: string; value: string }[]): FollowReport {
  const line = (r: StoredRecord) => `${r.offset}:${r.key}:${r.value}`;
  const first = readers[0]!.map(line).join('\n');
  const report: FollowReport = { missing: 0, repeatedOrUnordered: 0, disagreeing: 0 };
  for (const seen of readers) {
    if (seen.map(line).join('\n') !== first) report.disagreeing += 1;
    const byOffset = new Map<number, StoredRecord>();
    let previous = 0;
    for (const record of seen) {
      if (record.offset <= previous) report.repeatedOrUnordered += 1;
      previous = Math.max(previous, record.offset);
      byOffset.set(record.offset, record);
    }
    for (const write of acked) {
      const record = byOffset.get(write.offset);
      if (!record || record.key !== write.key || record.value !== write.value) report.missing += 1;
    }
  }
  return report;
}
