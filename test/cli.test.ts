import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './helpers.js';
import { cli } from './support/cli.js';

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

describe('statelog CLI', () => {
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

  it('reports an unreachable server with exit 1', async () => {
    const down = await cli(['get', 'k'], { STATELOG_URL: 'http://127.0.0.1:9' });
    expect(down.code).toBe(1);
  });

  it('backs up online and restores offline with a new epoch', async () => {
    await cli(['put', 'a', '1'], env);
    await cli(['put', 'b', '{"x":[true]}'], env);
    const backupFile = join(t.dir, 'backup.db');
    const backup = await cli(['backup', backupFile, '--db', t.dbPath], env);
    expect(backup.code, backup.stderr).toBe(0);
    expect(existsSync(backupFile)).toBe(true);

    // Refused while the server has the database open.
    const busy = await cli(['restore', backupFile, '--db', t.dbPath], env);
    expect(busy.code).toBe(1);
    expect(busy.stderr).toMatch(/in use/);

    await cli(['put', 'c', '"after backup"'], env);
    const epochBefore = t.app.services.store.epoch;
    await t.app.close();
    const restore = await cli(['restore', backupFile, '--db', t.dbPath], env);
    expect(restore.code, restore.stderr).toBe(0);

    const dir = t.dir;
    t = await startApp({}, dir);
    expect(t.app.services.store.epoch).not.toBe(epochBefore);
    expect((await t.http.get('/v1/keys/a')).body.value).toBe(1);
    expect((await t.http.get('/v1/keys/b')).body.value).toEqual({ x: [true] });
    expect((await t.http.get('/v1/keys/c')).status).toBe(404);
    expect((await t.http.get('/v1/stats')).body.head).toBe(2);
  });

  it('refuses to restore something that is not a statelog backup', async () => {
    const bogus = join(t.dir, 'bogus.db');
    writeFileSync(bogus, 'not a database at all, not even close'.repeat(200));
    const result = await cli(['restore', bogus, '--db', join(t.dir, 'other.db')], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/not a statelog backup|damaged/);
  });
});
