// A statelog process on PostgreSQL: start-up refusals in one line, and a graceful
// shutdown that answers its writes and leaves no connection behind.
import { createServer, type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { runServerExpectingExit } from '../support/child-server.js';
import { fixture, http, sleep, type Fixture } from './fixtures.js';

let f: Fixture | undefined;
afterEach(async () => {
  await f?.cleanup();
  f = undefined;
});

/** A loopback port with nothing listening on it. */
async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

describe('start-up on PostgreSQL', () => {
  it('refuses STATELOG_STORE=postgres without DATABASE_URL in one line naming it', async () => {
    const { code, stderr, stdout } = await runServerExpectingExit({ STATELOG_STORE: 'postgres', DATABASE_URL: '' });
    expect(code).toBe(1);
    expect(stderr.trim().split('\n')).toEqual(['statelog: invalid setting DATABASE_URL: required when STATELOG_STORE=postgres']);
    expect(stdout).toBe('');
  });

  it('stops with one line, exit 1 and no password shown, when the database cannot be reached', async () => {
    const port = await closedPort();
    const { code, stderr } = await runServerExpectingExit({
      STATELOG_STORE: 'postgres',
      DATABASE_URL: `postgres://statelog:s3cret-pw@127.0.0.1:${port}/statelog`,
    });
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`cannot open the database postgres://statelog:\\*\\*\\*@127\\.0\\.0\\.1:${port}/statelog: .*ECONNREFUSED`));
    expect(stderr).not.toContain('s3cret');
  });
});

describe('graceful shutdown on PostgreSQL', () => {
  it('on SIGTERM with writes in flight: exits 0, keeps every answered write, closes its connections', async () => {
    f = await fixture();
    const server = await f.spawn();
    const answered: { key: string; offset: number }[] = [];
    const writer = async (w: number) => {
      for (let i = 0; ; i++) {
        const key = `w${w}-${i}`;
        try {
          const answer = await http(server.url, 'PUT', `/v1/keys/${key}`, { value: i });
          if (answer.status !== 200) return; // 503: shutting down
          answered.push({ key, offset: answer.body.offset });
        } catch {
          return; // cut by the shutdown: never answered, so never promised
        }
      }
    };
    const writers = Array.from({ length: 8 }, (_, w) => writer(w));
    await sleep(500);
    server.proc.kill('SIGTERM');
    await Promise.all(writers);
    expect((await server.exited).code).toBe(0);
    expect(answered.length).toBeGreaterThan(0);

    const admin = await f.connect();
    const left = await admin.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'statelog'",
    );
    expect(left.rows[0].n).toBe(0);
    const found = await admin.query<{ key: string; seq: number }>('SELECT key, seq::int FROM state WHERE live');
    const offsets = new Map(found.rows.map((row) => [row.key, row.seq]));
    for (const write of answered) expect(offsets.get(write.key)).toBe(write.offset);
  });
});
