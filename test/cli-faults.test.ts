// The statelog command as an operator meets it when things go wrong, each step a real
// child process: a server killed under `tail`, resets, a wrong token, a server that is
// down, a URL without a scheme, `| head`, an unwritable --out, and a backup through one
// server restored into another.
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StatelogClient } from '@statelog/client';
import { json, startApp, tempDir, testStore, type TestApp, type TestStore } from './support/helpers.js';
import { spawnServer, type UrlServer } from './support/child-server.js';
import { cli, cliPiped, cliProcess } from './support/cli.js';
import { portOf } from './support/http.js';

const apps: TestApp[] = [];
const servers: UrlServer[] = [];
const children: ReturnType<typeof cliProcess>[] = [];
let dir: string | undefined;
let store: TestStore | undefined;
afterEach(async () => {
  for (const { child } of children.splice(0)) child.kill('SIGKILL');
  for (const server of servers.splice(0)) server.proc.kill('SIGKILL');
  for (const t of apps.splice(0)) await t.close();
  if (dir && existsSync(dir)) rmSync(dir, { recursive: true, force: true });
  await store?.drop();
  store = dir = undefined;
});

async function app(env: Record<string, string> = {}): Promise<{ t: TestApp; env: Record<string, string> }> {
  const t = await startApp(env);
  apps.push(t);
  return { t, env: { STATELOG_URL: `http://127.0.0.1:${portOf(t.app.server)}` } };
}

const lines = (text: string) => text.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>);

async function until(check: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

// Each step starts a CLI process (1 to 4 s apiece on a busy machine).
describe('statelog under faults', { timeout: 120_000 }, () => {
  it('tail reconnects across kill -9 of the server and resumes with no gap and no duplicate; --until ends it', async () => {
    dir = tempDir();
    store = await testStore(dir, 'tail.db');
    let server = await spawnServer(store.env);
    servers.push(server);
    const client = new StatelogClient({ url: server.url });
    for (let i = 1; i <= 5; i++) await client.put(`k${i}`, i);
    const tail = cliProcess(['tail', '--after', '2', '--until', '20'], { STATELOG_URL: server.url });
    children.push(tail);
    await until(() => lines(tail.output.stdout).length === 3, 'the first three records');

    const { port } = server;
    server.proc.kill('SIGKILL');
    await server.exited;
    await until(() => /reconnecting in/.test(tail.output.stderr), 'the tail to say it reconnects');
    server = await spawnServer({ ...store.env, PORT: String(port) });
    servers.push(server);
    for (let i = 6; i <= 20; i++) await client.put(`k${i % 4}`, i);

    expect(await tail.exited).toBe(0);
    const offsets = lines(tail.output.stdout).map((record) => record.offset);
    expect(offsets).toEqual(Array.from({ length: 18 }, (_, i) => i + 3));
    expect(tail.output.stderr).toMatch(new RegExp(`statelog: lost the stream from ${server.url}|cannot reach ${server.url}`));
  });

  it('tail --snapshot prints the keys, then initialized; --key follows one key; --once ends at the head', async () => {
    const { t, env } = await app();
    await t.http.post('/v1/records').set(json).send({ records: [{ key: 'a', value: 1 }, { key: 'b', value: 2 }, { key: 'ab', value: 3 }] }).expect(200);
    const snapshot = await cli(['tail', '--snapshot', '--once'], env);
    expect(snapshot.code, snapshot.stderr).toBe(0);
    expect(lines(snapshot.stdout)).toEqual([
      expect.objectContaining({ key: 'a', value: 1, op: 'set' }),
      expect.objectContaining({ key: 'ab', value: 3 }),
      expect.objectContaining({ key: 'b', value: 2 }),
      { initialized: true, offset: 3, epoch: t.app.services.store.epoch },
    ]);
    const oneKey = await cli(['tail', '--after', '0', '--key', 'a', '--once'], env);
    expect(oneKey.code, oneKey.stderr).toBe(0);
    expect(lines(oneKey.stdout).map((r) => r.key)).toEqual(['a']);
  });

  it('tail ends with exit 1 and the reason at a reset it cannot follow', async () => {
    const { t, env } = await app({ STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    await t.http.post('/v1/records').set(json).send({ records: [{ key: 'gone', value: 1 }, { key: 'gone', op: 'delete' }, { key: 'k', value: 1 }] }).expect(200);
    await t.http.post('/v1/admin/compact').expect(200);
    const behind = await cli(['tail', '--after', '0'], env);
    expect(behind.code).toBe(1);
    expect(behind.stderr).toMatch(/^statelog: offset_compacted: .*take a new snapshot \(tail --snapshot starts again from the keys\) \(horizon: 2\)\n$/);
  });

  it('a wrong token: exit 1 with unauthorized; a down server: exit 3 naming the URL and the cause', async () => {
    const { env } = await app({ STATELOG_TOKENS: 'read:right-token' });
    const refused = await cli(['get', 'k'], { ...env, STATELOG_TOKEN: 'wrong-token' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^statelog: unauthorized: /);
    const tail = await cli(['tail'], { ...env, STATELOG_TOKEN: 'wrong-token' });
    expect(tail.code).toBe(1);

    dir = tempDir();
    store = await testStore(dir, 'down.db');
    const server = await spawnServer(store.env);
    server.proc.kill('SIGKILL');
    await server.exited;
    for (const args of [['get', 'k'], ['tail'], ['backup', '--out', join(dir, 'never.ndjson')]]) {
      const down = await cli(args, { STATELOG_URL: server.url });
      expect(down, args.join(' ')).toMatchObject({ code: 3, stdout: '', stderr: `statelog: cannot reach ${server.url}: connection refused\n` });
    }
    expect(existsSync(join(dir, 'never.ndjson'))).toBe(false);
  });

  it('usage: a URL without a scheme is refused with exit 2; --version; --help lists the exit codes', async () => {
    const noScheme = await cli(['get', 'k'], { STATELOG_URL: '127.0.0.1:18099' });
    expect(noScheme).toMatchObject({ code: 2, stderr: 'statelog: --url 127.0.0.1:18099 has no scheme: write http://127.0.0.1:18099 (or https://)\n' });
    const version = await cli(['--version']);
    expect(version).toMatchObject({ code: 0, stdout: `${JSON.parse(readFileSync('package.json', 'utf8')).version}\n` });
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    const codes = help.stdout.slice(help.stdout.indexOf('Exit codes:')).split('\n').map((line) => line.trim().split(/\s+/)[0]);
    expect(codes.filter((word) => /^\d$/.test(word!))).toEqual(['0', '1', '2', '3']);
  });

  it('a failed condition prints currentOffset; an unwritable --out is one line and exit 1', async () => {
    const { env } = await app();
    await cli(['put', 'k', '1'], env);
    await cli(['put', 'k', '2'], env);
    const stale = await cli(['put', 'k', '3', '--if-match', '1'], env);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toMatch(/^statelog: precondition_failed: .*\(currentOffset: 2\)\n$/);
    for (const command of ['snapshot', 'backup']) {
      const unwritable = await cli([command, '--out', '/nonexistent/x'], env);
      expect(unwritable, command).toMatchObject({ code: 1, stdout: '', stderr: 'statelog: cannot write /nonexistent/x: no such file or directory\n' });
    }
  });

  it('`statelog ls | head -2` and `statelog tail | head -1` end quietly with exit 0', async () => {
    const { t, env } = await app();
    const records = Array.from({ length: 1000 }, (_, i) => ({ key: `key/${String(i).padStart(4, '0')}`, value: 'x'.repeat(200) }));
    for (let i = 0; i < 3; i++) await t.http.post('/v1/records').set(json).send({ records }).expect(200);
    const ls = await cliPiped(['ls'], 'head -2', env);
    expect(ls).toMatchObject({ code: 0, stderr: '' });
    expect(lines(ls.stdout).map((e) => e.key)).toEqual(['key/0000', 'key/0001']);
    const tail = await cliPiped(['tail', '--after', '0'], 'head -1', env);
    expect(tail).toMatchObject({ code: 0, stderr: '' });
    expect(lines(tail.stdout)).toHaveLength(1);
  });

  it('backup through one server, restore into another: the same state and values, a new epoch', async () => {
    const source = await app();
    const target = await app();
    const records = [
      { key: 'user/1', value: { name: 'Ada', balance: 150, tags: ['a', 'b'] } },
      { key: 'user/2', value: 'text with "quotes" and\nnewline' },
      { key: 'n', value: 1.5e300 },
      { key: 'gone', value: true },
      ...Array.from({ length: 1200 }, (_, i) => ({ key: `bulk/${i}`, value: i })),
    ];
    await source.t.http.post('/v1/records').set(json).send({ records: records.slice(0, 600) }).expect(200);
    await source.t.http.post('/v1/records').set(json).send({ records: records.slice(600) }).expect(200);
    await source.t.http.delete('/v1/keys/gone').expect(200);
    const file = join(source.t.dir, 'backup.ndjson');
    const backup = await cli(['backup', '--out', file], source.env);
    expect(backup.code, backup.stderr).toBe(0);
    const saved = lines(readFileSync(file, 'utf8'));
    expect(saved.at(-1)).toEqual({
      end: true,
      offset: 1205,
      count: 1203,
      epoch: source.t.app.services.store.epoch,
      digest: (await source.t.http.get('/v1/stats')).body.digest,
      sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(await cli(['backup', '--out', file], source.env)).toMatchObject({ code: 1, stderr: `statelog: ${file} exists; choose a new file\n` });

    const restore = await cli(['restore', file], target.env);
    expect(restore.code, restore.stderr).toBe(0);
    expect(restore.stderr).toMatch(/^restored 1203 keys from .* to http:\/\/127\.0\.0\.1:\d+; head \d+/);
    const sourceClient = new StatelogClient({ url: source.env.STATELOG_URL! });
    const targetClient = new StatelogClient({ url: target.env.STATELOG_URL! });
    const stateOf = async (client: StatelogClient) => {
      const state = new Map<string, unknown>();
      for await (const entry of await client.snapshot()) state.set(entry.key, entry.value);
      return state;
    };
    const expected = await stateOf(sourceClient);
    expect(expected.size).toBe(1203);
    expect(await stateOf(targetClient)).toEqual(expected);
    expect(target.t.app.services.store.epoch).not.toBe(source.t.app.services.store.epoch);

    // A server with keys is refused; --force makes its state the backup's.
    await targetClient.put('extra', 1);
    await targetClient.put('user/1', 'changed');
    const refused = await cli(['restore', file], target.env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/has 1204 live keys: restore loads into an empty server \(--force/);
    const forced = await cli(['restore', file, '--force'], target.env);
    expect(forced.code, forced.stderr).toBe(0);
    expect(await stateOf(targetClient)).toEqual(expected);

    // A cut backup is refused before anything is written.
    const cut = join(source.t.dir, 'cut.ndjson');
    const text = readFileSync(file, 'utf8').split('\n');
    await import('node:fs').then((fs) => fs.writeFileSync(cut, text.slice(0, 100).join('\n') + '\n'));
    const fresh = await app();
    const incomplete = await cli(['restore', cut], fresh.env);
    expect(incomplete).toMatchObject({ code: 1, stderr: `statelog: ${cut} ends without its trailer line: the backup is incomplete\n` });
    expect(((await new StatelogClient({ url: fresh.env.STATELOG_URL! }).stats()) as { liveKeys: number }).liveKeys).toBe(0);
  });
});
