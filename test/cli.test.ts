import { spawn } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { StateMirror, StatelogClient, type ResetEvent } from '@statelog/client';
import { startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import { cli, NODE_ARGS } from './support/cli.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** A port nothing listens on: one the system gave out a moment ago. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

let t: TestApp;
let env: Record<string, string>;
beforeEach(async () => {
  t = await startApp();
  const { port } = t.app.server.address() as { port: number };
  env = { STATELOG_URL: `http://127.0.0.1:${port}` };
});
afterEach(async () => {
  await t.close();
});

// Each step starts a CLI process (1 to 4 s apiece on a busy machine): more than the default 30 s.
describe('statelog CLI', { timeout: 120_000 }, () => {
  it('puts, gets, increments, lists and deletes', async () => {
    expect(await cli(['put', 'user/1', '{"balance":5}'], env)).toMatchObject({ code: 0, stdout: '{"key":"user/1","offset":1}\n' });
    expect(await cli(['put', 'name', 'Ada', '--string'], env)).toMatchObject({ code: 0 });
    expect(await cli(['put', 'piped'], env, '[1,2]\n')).toMatchObject({ code: 0 });
    expect((await cli(['get', 'user/1'], env)).stdout).toBe('{"balance":5}\n');
    expect((await cli(['get', 'name'], env)).stdout).toBe('"Ada"\n');
    expect(JSON.parse((await cli(['get', 'piped', '--full'], env)).stdout)).toMatchObject({ key: 'piped', value: [1, 2], offset: 3 });
    expect((await cli(['incr', 'n', '5'], env)).stdout).toBe('5\n');
    expect((await cli(['incr', 'n'], env)).stdout).toBe('6\n');
    const listed = (await cli(['ls', '--prefix', 'user/'], env)).stdout.trim().split('\n');
    expect(listed.map((line) => JSON.parse(line).key)).toEqual(['user/1']);
    expect((await cli(['ls', '--keys-only'], env)).stdout).toBe('n\nname\npiped\nuser/1\n');
    expect(await cli(['del', 'name'], env)).toMatchObject({ code: 0 });
    expect(JSON.parse((await cli(['stats'], env)).stdout)).toMatchObject({ head: 6, liveKeys: 3 });
  });

  it('increments within --min and --max, and refuses past them with the current value', async () => {
    expect((await cli(['incr', 'balance', '3'], env)).stdout).toBe('3\n');
    expect(await cli(['incr', 'balance', '-3', '--min', '0'], env)).toMatchObject({ code: 0, stdout: '0\n' });
    const overdrawn = await cli(['incr', 'balance', '-5', '--min', '0'], env);
    expect(overdrawn.code).toBe(1);
    expect(overdrawn.stderr).toMatch(/out_of_range/);
    expect(overdrawn.stderr).toMatch(/value: 0, offset: 2/);
    expect((await cli(['incr', 'balance', '2', '--max', '1'], env)).code).toBe(1);
    expect((await cli(['incr', 'balance', '1', '--min', '2', '--max', '1'], env)).code).toBe(2);
    expect((await cli(['incr', 'balance', '1', '--min', 'zero'], env)).code).toBe(2);
    expect((await cli(['get', 'balance'], env)).stdout).toBe('0\n');
  });

  it('lists, shows, commits and deletes consumers', async () => {
    for (let i = 0; i < 3; i++) await cli(['put', `k${i}`, String(i)], env);
    expect(JSON.parse((await cli(['consumers', 'commit', 'billing', '2', '--hold'], env)).stdout)).toMatchObject({ name: 'billing', offset: 2, lag: 1, hold: true });
    const behind = await cli(['consumers', 'commit', 'billing', '1'], env);
    expect(behind.code).toBe(1);
    expect(behind.stderr).toMatch(/conflict/);
    expect(JSON.parse((await cli(['consumers', 'commit', 'billing', '1', '--rewind'], env)).stdout)).toMatchObject({ offset: 1, hold: true });
    expect(JSON.parse((await cli(['consumers', 'commit', 'billing', '3', '--no-hold'], env)).stdout)).toMatchObject({ offset: 3, hold: false });
    expect(JSON.parse((await cli(['consumers', 'show', 'billing'], env)).stdout)).toMatchObject({ name: 'billing', offset: 3, lag: 0 });
    const listed = (await cli(['consumers'], env)).stdout.trim().split('\n').map((line) => JSON.parse(line));
    expect(listed.map((c: { name: string }) => c.name)).toEqual(['billing']);
    expect((await cli(['consumers', 'commit', 'billing', 'x'], env)).code).toBe(2);
    expect(await cli(['consumers', 'delete', 'billing'], env)).toMatchObject({ code: 0 });
    const gone = await cli(['consumers', 'show', 'billing'], env);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/not_found/);
    expect((await cli(['consumers', 'delete', 'billing'], env)).code).toBe(1);
  });

  it('exits 1 with the server\'s code when refused, 2 on usage errors', async () => {
    const missing = await cli(['get', 'nothing'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/not_found/);
    await cli(['put', 'k', '1'], env);
    const stale = await cli(['put', 'k', '2', '--if-match', '7'], env);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toMatch(/precondition_failed/);
    expect((await cli(['put', 'k', 'not json'], env)).code).toBe(2);
    expect((await cli(['frobnicate'], env)).code).toBe(2);
    expect((await cli(['put', 'k', '1', '--if-match', 'x'], env)).code).toBe(2);
    const help = await cli(['del', '--help'], env);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Usage: statelog del/);
  });

  it('writes a snapshot with its trailer, compacts and prints stats', async () => {
    for (let i = 0; i < 30; i++) await t.http.put(`/v1/keys/k${i % 10}`).set('content-type', 'application/json').send({ value: i });
    const out = join(t.dir, 'snap.ndjson');
    const snapshot = await cli(['snapshot', '--out', out], env);
    expect(snapshot.code, snapshot.stderr).toBe(0);
    const lines = readFileSync(out, 'utf8').trim().split('\n').map((line) => JSON.parse(line));
    expect(lines).toHaveLength(11);
    expect(lines[10]).toMatchObject({ end: true, offset: 30, count: 10 });
    expect(lines[0]).toMatchObject({ key: 'k0', value: 20 });
    const toStdout = await cli(['snapshot', '--prefix', 'k1'], env);
    expect(toStdout.stdout.trim().split('\n').map((line) => JSON.parse(line).key ?? 'end')).toEqual(['k1', 'end']);

    const compacted = JSON.parse((await cli(['compact'], env)).stdout);
    expect(compacted).toMatchObject({ removed: 20, head: 30 });
    expect(JSON.parse((await cli(['stats'], env)).stdout)).toMatchObject({ records: 10, liveKeys: 10 });
  });

  it('tails the change stream as JSON lines', async () => {
    await cli(['put', 'before', '1'], env);
    const tail = spawn(process.execPath, [...NODE_ARGS, 'tail', '--prefix', 'live/'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
    });
    let out = '';
    tail.stdout.on('data', (chunk) => (out += chunk));
    // Writes until the tail has printed them (it starts after the head it saw at start).
    for (let i = 0; !out.includes('"live/b"'); i++) {
      await cli(['put', i % 2 ? 'live/b' : 'other', String(i)], env);
      expect(i).toBeLessThan(20);
    }
    tail.kill('SIGTERM');
    const records = out.trim().split('\n').map((line) => JSON.parse(line));
    expect(records.every((r) => r.key.startsWith('live/') && r.op === 'set')).toBe(true);
    expect(records.map((r) => r.offset)).toEqual([...records.map((r) => r.offset)].sort((a, b) => a - b));
  });

  it('reports an unreachable server with exit 3, naming the URL and the cause', async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const down = await cli(['get', 'k'], { STATELOG_URL: url });
    expect(down).toMatchObject({ code: 3, stderr: `statelog: cannot reach ${url}: connection refused\n` });
  });
});

// statelog backup and restore copy SQLite files (the SQLite backup API); a PostgreSQL
// log is backed up with PostgreSQL's own tools.
describe.runIf(TEST_STORE === 'sqlite')('statelog backup and restore', () => {
  it('backs up online and restores offline with a new epoch; a mirror across the restore resets', async () => {
    await cli(['put', 'a', '1'], env);
    await cli(['put', 'b', '{"x":[true]}'], env);
    const mirror = new StateMirror({ url: env.STATELOG_URL!, retry: { baseDelayMs: 20, maxDelayMs: 200 }, warn: () => {} });
    const resets: ResetEvent[] = [];
    mirror.on('reset', (event: ResetEvent) => resets.push(event));
    await mirror.ready;

    // A consumer in the file: kept by the restore, its position reset in the new epoch.
    await t.http.put('/v1/consumers/w').set('content-type', 'application/json').send({ offset: 2, hold: true });
    const backupFile = join(t.dir, 'backup.db');
    const backup = await cli(['backup', '--db', t.dbPath, '--out', backupFile], env);
    expect(backup.code, backup.stderr).toBe(0);
    expect(existsSync(backupFile)).toBe(true);

    // Refused while the server has the database open.
    const busy = await cli(['restore', backupFile, '--db', t.dbPath], env);
    expect(busy.code).toBe(1);
    expect(busy.stderr).toMatch(/in use/);

    await cli(['put', 'c', '"after backup"'], env);
    const epochBefore = t.app.services.store.epoch;
    const { config } = t.app.services;
    const { port } = t.app.server.address() as { port: number };
    await t.app.close();
    const restore = await cli(['restore', backupFile, '--db', t.dbPath], env);
    expect(restore.code, restore.stderr).toBe(0);

    // The restored database behind the same address.
    const restored = await buildApp(config);
    await restored.listen({ port, host: '127.0.0.1' });
    try {
      expect(restored.services.store.epoch).not.toBe(epochBefore);
      const client = new StatelogClient({ url: env.STATELOG_URL! });
      expect((await client.get('a'))!.value).toBe(1);
      expect((await client.get('b'))!.value).toEqual({ x: [true] });
      expect(await client.get('c')).toBeNull();
      expect(((await client.stats()) as { head: number }).head).toBe(2);
      expect(await client.consumer('w')).toMatchObject({ offset: 0, epoch: restored.services.store.epoch, lag: 2, hold: true });

      // The mirror had seen offset 3, which the restored log never had: it starts over.
      for (let i = 0; resets.length === 0; i++) {
        expect(i).toBeLessThan(200);
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      expect(resets[0]).toEqual({ reason: 'epoch_changed' });
      expect(mirror.epoch).toBe(restored.services.store.epoch);
      expect(mirror.has('c')).toBe(false);
      expect(mirror.get('a')).toBe(1);
    } finally {
      await mirror.close();
      await restored.close();
    }
  });

  it('refuses to restore something that is not a statelog backup', async () => {
    const bogus = join(t.dir, 'bogus.db');
    writeFileSync(bogus, 'not a database at all, not even close'.repeat(200));
    const result = await cli(['restore', bogus, '--db', join(t.dir, 'other.db')], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/not a statelog backup|damaged/);
  });
});
