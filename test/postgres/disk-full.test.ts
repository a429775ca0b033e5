// A full disk under PostgreSQL: the test database's tables live in a tablespace on a
// tmpfs mounted with a size limit, so writes fail with the server's real disk_full
// (53100) once a filler file takes the space. Writes get 503 `unavailable` with
// Retry-After, /readyz answers 503 (reason no_space) while they fail, the node is ready
// again by itself once space returns, and nothing acknowledged is lost, across a
// kill -9 too. Mounting needs root (or CAP_SYS_ADMIN): elsewhere the file is skipped.
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import pg from 'pg';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { pgAdminUrl } from '../../harness/pg-database.js';
import { expectAllThere, putValue, Writers } from '../support/acked-writes.js';
import { smallDisk, type SmallDisk } from '../support/small-disk.js';
import { childServers } from '../support/child-server.js';

const admin = new pg.Client({ connectionString: pgAdminUrl() });
await admin.connect();
// The tablespace's folder must belong to the user the PostgreSQL server runs as.
const dataDir = (await admin.query<{ data_directory: string }>('SHOW data_directory')).rows[0]!.data_directory;
const { uid, gid } = statSync(dataDir);
const disk: SmallDisk = smallDisk('24m', { uid, gid });
const tablespace = `statelog_test_full_${process.pid}`;
const servers = childServers();

afterAll(async () => {
  if (disk.mounted) await admin.query(`DROP TABLESPACE IF EXISTS ${tablespace}`);
  await admin.end();
  disk.remove();
});

describe.runIf(disk.mounted)('a full disk under PostgreSQL (a tablespace on a tmpfs with a size limit)', () => {
  it('answers writes 503 with Retry-After and /readyz 503 while they fail, is ready again by itself, and loses nothing acknowledged', async () => {
    const url = (await servers.database({ empty: true })).env.DATABASE_URL!;
    const database = new URL(url).pathname.slice(1);
    await admin.query(`CREATE TABLESPACE ${tablespace} LOCATION '${disk.dir}'`);
    // Before statelog's first session: its migrations create the tables there.
    await admin.query(`ALTER DATABASE ${database} SET default_tablespace = ${tablespace}`);
    let server = await servers.start();
    // Values PostgreSQL cannot compress, each too big for the room left in the log's pages.
    const bigValue = () => `"${randomBytes(6000).toString('base64')}"`;
    const put = (key: string) => fetch(`${server.url}/v1/keys/${key}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: `{"value":${bigValue()}}` });

    disk.fill(2 * 1024 * 1024);
    const writers = new Writers(4, (w, i) => putValue(server.url, `full-${w}-${i}`, bigValue()));
    await vi.waitFor(() => expect(writers.refused.length).toBeGreaterThan(20), { timeout: 30_000, interval: 50 });
    await writers.stop();
    expect(writers.acked.length).toBeGreaterThan(0);
    expect(new Set(writers.refused)).toEqual(new Set([503]));

    const refused = await put('one-more');
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('unavailable');
    const ready = await fetch(`${server.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(ready.headers.get('retry-after')).toBe('1');
    expect(((await ready.json()) as { error: { reason: string } }).error.reason).toBe('no_space');
    // Reads go on.
    expect((await fetch(`${server.url}/v1/keys/${writers.acked[0]!.key}`)).status).toBe(200);

    // Readiness checks that arrive together share one probe (each writes about 1 MiB).
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {}); // ended by the database's drop if the test fails first
    await client.connect();
    const logBytes = async () => Number((await client.query<{ bytes: string }>("SELECT pg_relation_size('log') AS bytes")).rows[0]!.bytes);
    const before = await logBytes();
    disk.free();
    // Ready again within the readiness probe's period, by its one probe write.
    await vi.waitFor(async () => {
      const checks = await Promise.all(Array.from({ length: 8 }, () => fetch(`${server.url}/readyz`).then((res) => res.status)));
      expect(checks).toEqual(Array(8).fill(200));
    }, { timeout: 5000, interval: 100 });
    expect(await logBytes()).toBeLessThan(before + 2 * 1024 * 1024);
    await client.end();
    expect((await put('after')).status).toBe(200);

    await servers.kill(server);
    server = await servers.start();
    await expectAllThere(server.url, writers.acked);
  }, 90_000);
});
