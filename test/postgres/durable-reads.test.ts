// Nothing is served before it is durable. Appends commit without waiting for their flush or a
// synchronous standby (the meta row's lock is held for the append alone), so a record is in the
// database, visible to any transaction, before a barrier makes it durable; no node answers with it
// until then, neither to its writer nor to a reader on another node. The standby that never
// answers is a synchronous_standby_names naming none that exists, on a server of the test's own.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type UrlServer } from '../support/child-server.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../support/embedded-postgres.js';
import { http, NO_SHEDDING, sleep } from './fixtures.js';

const WRITE_TIMEOUT_MS = 1500;

let server: EmbeddedServer;
let admin: pg.Client;
const nodes: UrlServer[] = [];

/** Sets synchronous_standby_names and waits until new sessions see it. */
async function standbyNames(names: string): Promise<void> {
  await admin.query(names ? `ALTER SYSTEM SET synchronous_standby_names = '${names}'` : 'ALTER SYSTEM RESET synchronous_standby_names');
  await admin.query('SELECT pg_reload_conf()');
  for (let i = 0; i < 100; i++) {
    const probe = new pg.Client({ connectionString: server.url });
    await probe.connect();
    const { rows } = await probe.query<{ synchronous_standby_names: string }>('SHOW synchronous_standby_names');
    await probe.end();
    if (rows[0]!.synchronous_standby_names === names) return;
    await sleep(50);
  }
  throw new Error('the setting was not reloaded');
}

beforeAll(async () => {
  server = await startEmbeddedPostgres();
  admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  for (let i = 0; i < 2; i++) {
    nodes.push(
      await startServer({
        ...NO_SHEDDING,
        STATELOG_STORE: 'postgres',
        DATABASE_URL: server.url,
        STATELOG_COMPACT_INTERVAL_MS: '0',
        STATELOG_WRITE_TIMEOUT_MS: String(WRITE_TIMEOUT_MS),
      }),
    );
  }
}, 120_000);

afterAll(async () => {
  for (const node of nodes) node.proc.kill('SIGKILL');
  await admin?.end().catch(() => {});
  await server?.stop();
});

describe('reads and writes on PostgreSQL wait for durability', () => {
  it('a commit the standby has not confirmed is in the database, yet no node serves it; once confirmed, every node does', { timeout: 60_000 }, async () => {
    const [a, b] = nodes as [UrlServer, UrlServer];
    const first = await http(a.url, 'PUT', '/v1/keys/balance', { value: 1 });
    expect(first.status).toBe(200);

    await standbyNames('absent_standby');
    try {
      const write = http(a.url, 'PUT', '/v1/keys/balance', { value: 2 });
      // The append is applied at once: any transaction sees it.
      let seen = false;
      for (let i = 0; i < 100 && !seen; i++) {
        const { rows } = await admin.query("SELECT 1 FROM log WHERE key = 'balance' AND value = '2'");
        seen = rows.length > 0;
        if (!seen) await sleep(20);
      }
      expect(seen).toBe(true);

      // No lock is held through that wait: the next writes, of this node and of the other, are
      // appended while the first is still unconfirmed (they wait for the same confirmation).
      const others = [http(a.url, 'PUT', '/v1/keys/other-a', { value: 'a' }), http(b.url, 'PUT', '/v1/keys/other-b', { value: 'b' })];
      let appended = 0;
      for (let i = 0; i < 100 && appended < 2; i++) {
        const { rows } = await admin.query("SELECT key FROM log WHERE key IN ('other-a', 'other-b')");
        appended = rows.length;
        if (appended < 2) await sleep(20);
      }
      expect(appended).toBe(2);

      // Neither node shows it: each read waits for a barrier that does not complete, then 503.
      const [value, changes, list] = await Promise.all([
        http(b.url, 'GET', '/v1/keys/balance'),
        http(b.url, 'GET', '/v1/changes?after=0'),
        http(a.url, 'GET', '/v1/keys?prefix=bal'),
      ]);
      for (const answer of [value, changes, list]) {
        expect(answer.status).toBe(503);
        expect(JSON.stringify(answer.body)).not.toContain('"value":2');
      }
      // Its writer is told the outcome is unknown: it was applied, not confirmed.
      const answered = await write;
      expect(answered.status, JSON.stringify(answered.body)).toBe(503);
      expect(JSON.stringify(answered.body)).toContain('"outcome":"unknown"');
      for (const other of await Promise.all(others)) expect(JSON.stringify(other.body)).toContain('"outcome":"unknown"');
      // Readiness says why.
      const ready = await http(b.url, 'GET', '/readyz');
      expect(ready.status).toBe(503);
    } finally {
      await standbyNames('');
    }

    // The barrier completes with the standby requirement gone: the write is durable, and served.
    for (const node of [a, b]) {
      const value = await http(node.url, 'GET', '/v1/keys/balance');
      expect(value.status).toBe(200);
      expect(value.body.value).toBe(2);
      const changes = await http(node.url, 'GET', '/v1/changes?after=0');
      expect(changes.status).toBe(200);
      const values = changes.body.records.map((r: { value: unknown }) => r.value);
      expect(values.slice(0, 2)).toEqual([1, 2]);
      expect(values.slice(2).sort()).toEqual(['a', 'b']);
    }
  });
});
