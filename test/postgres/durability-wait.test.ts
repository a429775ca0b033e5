// A commit's wait for durability holds nothing another node's commits need. On a server of its
// own, every synchronous commit is held (a synchronous standby is named that never connects)
// while two nodes write: each node's barrier must then wait for the standby side by side with the
// other's, none queued behind it on a lock (PostgreSQL's notification lock is instance-wide and
// held through the commit of a transaction that notifies), and no write is acknowledged until the
// hold is lifted.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgStore } from '../../src/store/postgres/store.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../support/embedded-postgres.js';
import { write } from '../support/store-helpers.js';
import { sleep } from './fixtures.js';

let server: EmbeddedServer;
let admin: pg.Client;
const stores: PgStore[] = [];

beforeAll(async () => {
  server = await startEmbeddedPostgres();
  admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query('CREATE DATABASE statelog');
  const url = new URL(server.url);
  url.pathname = '/statelog';
  // One after the other: the first runs the migrations.
  for (let node = 0; node < 2; node++) {
    stores.push(await PgStore.open({ url: url.toString(), poolSize: 4, snapshotPoolSize: 1, sync: 'full', idempotencyTtlMs: 60_000 }));
  }
}, 60_000);

afterAll(async () => {
  await Promise.all(stores.map((store) => store.close()));
  await admin?.end();
  await server?.stop();
});

/**
 * statelog's barriers waiting for a synchronous standby (the readiness probe's commits wait too,
 * and are not counted), and its sessions queued on an object lock (the notification lock is one).
 */
async function waits(): Promise<{ barriers: number; lock: number }> {
  const { rows } = await admin.query<{ barriers: number; lock: number }>(
    `SELECT count(*) FILTER (WHERE wait_event = 'SyncRep' AND query LIKE '%''durable''%')::int AS barriers,
            count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'object')::int AS lock
     FROM pg_stat_activity WHERE datname = 'statelog' AND application_name = 'statelog'`,
  );
  return rows[0]!;
}

async function holdSynchronousCommits(hold: boolean): Promise<void> {
  await admin.query(hold ? `ALTER SYSTEM SET synchronous_standby_names = 'nobody'` : 'ALTER SYSTEM RESET synchronous_standby_names');
  await admin.query('SELECT pg_reload_conf()');
}

describe('commits waiting for durability (PostgreSQL)', () => {
  it("wait side by side across nodes: no node's barrier queues behind another's", async () => {
    let running = true;
    const acked: { key: string; value: string }[] = [];
    const writer = async (node: number, id: number) => {
      for (let n = 0; running; n++) {
        const key = `k${node}-${id}`;
        const value = String(n);
        const outcome = await write(stores[node]!, [{ op: 'set', key, value }]);
        if (outcome.ok) acked.push({ key, value });
      }
    };
    const writers = [0, 1].flatMap((node) => Array.from({ length: 16 }, (_, id) => writer(node, id)));
    // Under load each node's barriers follow one another, as they do when the hold begins.
    await sleep(300);
    expect(acked.length).toBeGreaterThan(0);
    await holdSynchronousCommits(true);
    let ackedWhileHeld: number;
    try {
      let seen = { barriers: 0, lock: 0 };
      for (const deadline = Date.now() + 5_000; Date.now() < deadline && seen.barriers + seen.lock < 2; await sleep(50)) seen = await waits();
      // One barrier from each node, both waiting for the standby, neither for the other.
      expect(seen).toEqual({ barriers: 2, lock: 0 });
      ackedWhileHeld = acked.length;
      await sleep(300);
      expect(await waits()).toEqual({ barriers: 2, lock: 0 });
      expect(acked.length).toBe(ackedWhileHeld);
    } finally {
      await holdSynchronousCommits(false);
      running = false;
      await Promise.all(writers);
    }
    // Released with the hold: the writes that waited are answered.
    expect(acked.length).toBeGreaterThan(ackedWhileHeld);
    // Every acknowledged write is there, on either node.
    const last = new Map(acked.map(({ key, value }) => [key, value]));
    for (const [key, value] of last) {
      expect((await stores[1]!.get(key))?.value).toBe(value);
      expect((await stores[0]!.get(key))?.value).toBe(value);
    }
  }, 60_000);
});
