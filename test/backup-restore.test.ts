// A logical backup (`statelog backup --out`) restored through the server, each step a
// real CLI process: keys keep their expiry, a key past it is not brought back, a file
// changed after the backup is refused, and a backup the target cannot take whole is
// refused before anything is written, --force or not.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StatelogClient } from '@statelog/client';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { json, startApp, type TestApp } from './support/helpers.js';
import { cli } from './support/cli.js';
import { portOf } from './support/http.js';

const apps: TestApp[] = [];
const clients: StatelogClient[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) await client.close();
  for (const t of apps.splice(0)) await t.close();
});

async function server(env: Record<string, string> = {}): Promise<{ t: TestApp; env: Record<string, string>; client: StatelogClient }> {
  // The expirer is off: a key past its expiry stays in the log, as it may when a backup is taken.
  const t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0', ...env });
  apps.push(t);
  const url = `http://127.0.0.1:${portOf(t.app.server)}`;
  const client = new StatelogClient({ url });
  clients.push(client);
  return { t, env: { STATELOG_URL: url }, client };
}

const stats = async (client: StatelogClient) => (await client.stats()) as { head: number; liveKeys: number };
const lines = (file: string) => readFileSync(file, 'utf8').trim().split('\n');

async function stateOf(client: StatelogClient): Promise<Map<string, unknown>> {
  const state = new Map<string, unknown>();
  for await (const entry of client.list()) state.set(entry.key, entry.value);
  return state;
}

describe('backup and restore through the server', { timeout: 120_000 }, () => {
  it('carries each key\'s expiry; a key past it is not restored', async () => {
    const source = await server();
    await source.client.put('dead', 1, { ttlMs: 300 });
    await source.client.put('plain', { n: 1.5 });
    await source.client.put('lease', 'w1', { ttlMs: 600_000 });
    await source.client.put('soon', 2, { ttlMs: 2_500 });
    await new Promise((resolve) => setTimeout(resolve, 400));
    const file = join(source.t.dir, 'backup.ndjson');
    const backup = await cli(['backup', '--out', file], source.env);
    expect(backup.code, backup.stderr).toBe(0);
    const saved = lines(file).map((line) => JSON.parse(line) as Record<string, unknown>);
    const expiresAt = (key: string) => saved.find((line) => line.key === key)?.expiresAt as number;
    // 'dead' is past its expiry, its tombstone not yet written: the line says so.
    expect(expiresAt('dead')).toBeLessThanOrEqual(Date.now());
    expect(expiresAt('lease')).toBe((await source.client.get('lease'))!.expiresAt);
    expect(saved.at(-1)).toMatchObject({ end: true, count: 4, digest: expect.stringMatching(/^[0-9a-f]{16}$/), sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });

    const target = await server();
    // Restored after 'soon' expired too.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, expiresAt('soon') - Date.now() + 10)));
    const restore = await cli(['restore', file], target.env);
    expect(restore.code, restore.stderr).toBe(0);
    expect(restore.stderr).toMatch(/^restored 2 keys from .*, left out 2 keys past their expiry; head 2/);
    expect(await stateOf(target.client)).toEqual(new Map<string, unknown>([['lease', 'w1'], ['plain', { n: 1.5 }]]));
    const lease = (await target.client.get('lease'))!.expiresAt!;
    // The same moment, give or take the time the restore's request took.
    expect(lease - expiresAt('lease')).toBeGreaterThanOrEqual(0);
    expect(lease - expiresAt('lease')).toBeLessThan(5_000);
    expect((await target.client.get('plain'))!.expiresAt).toBeUndefined();
  });

  it('refuses a file changed after the backup: a value, two lines swapped, an injected ttlMs; nothing is written', async () => {
    const source = await server();
    await source.t.http.post('/v1/records').set(json).send({ records: [{ key: 'a', value: 1 }, { key: 'b', value: 2 }, { key: 'c', value: 3 }] }).expect(200);
    const file = join(source.t.dir, 'backup.ndjson');
    expect((await cli(['backup', '--out', file], source.env)).code).toBe(0);
    const original = lines(file);
    const target = await server();
    await target.client.put('mine', 1);
    const before = await stats(target.client);
    const tampered = {
      value: original.map((line, i) => (i === 1 ? line.replace('"value":2', '"value":20') : line)),
      swapped: [original[1]!, original[0]!, ...original.slice(2)],
      ttl: original.map((line, i) => (i === 0 ? line.replace('"value":1', '"value":1,"ttlMs":1') : line)),
      expiry: original.map((line, i) => (i === 2 ? line.replace(/}$/, ',"expiresAt":1}') : line)),
    };
    for (const [name, content] of Object.entries(tampered)) {
      const changed = join(source.t.dir, `${name}.ndjson`);
      writeFileSync(changed, `${content.join('\n')}\n`);
      const result = await cli(['restore', changed, '--force'], target.env);
      expect(result.code, name).toBe(1);
      expect(result.stderr, name).toMatch(/the file was changed/);
    }
    expect(await stats(target.client)).toMatchObject({ head: before.head, liveKeys: 1 });
  });

  it('checks every value against the target\'s limit first: a refused restore leaves the server as it was, --force too', async () => {
    const source = await server({ STATELOG_MAX_VALUE_BYTES: '4096' });
    const records = Array.from({ length: 40 }, (_, i) => ({ key: `k${String(i).padStart(2, '0')}`, value: 'x'.repeat(900) }));
    await source.t.http.post('/v1/records').set(json).send({ records }).expect(200);
    const small = join(source.t.dir, 'small.ndjson');
    expect((await cli(['backup', '--out', small], source.env)).code).toBe(0);
    await source.client.put('zz-large', 'y'.repeat(2000));
    const large = join(source.t.dir, 'large.ndjson');
    expect((await cli(['backup', '--out', large], source.env)).code).toBe(0);

    // Values within the limit, batches sized by the target's body limit (8 values' worth).
    const target = await server({ STATELOG_MAX_VALUE_BYTES: '1024' });
    const fits = await cli(['restore', small], target.env);
    expect(fits.code, fits.stderr).toBe(0);
    expect((await stats(target.client)).liveKeys).toBe(40);

    await target.client.put('k00', 'changed');
    const before = await stats(target.client);
    const stateBefore = await stateOf(target.client);
    for (const args of [['restore', large], ['restore', large, '--force']]) {
      const refused = await cli(args, target.env);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/the value of "zz-large" is 2002 bytes; the server takes at most 1024 \(STATELOG_MAX_VALUE_BYTES\)/);
      expect(await stats(target.client)).toMatchObject({ head: before.head, liveKeys: 40 });
    }
    expect(await stateOf(target.client)).toEqual(stateBefore);
  });

  it('a batch refused midway puts back the keys the server held, with their expiries', async () => {
    const target = await server();
    await target.client.put('mine/1', { a: 1 });
    await target.client.put('mine/2', 'two', { ttlMs: 600_000 });
    const before = await stateOf(target.client);
    const leaseBefore = (await target.client.get('mine/2'))!.expiresAt!;
    // A file whose trailer checks out (its digests recomputed), with a last value the
    // server refuses (beyond a double's range): what a restore cannot see before writing.
    const entries = [
      ...Array.from({ length: 1200 }, (_, i) => ({ key: `b/${String(i).padStart(4, '0')}`, value: `${i}`, offset: i + 1 })),
      { key: 'z', value: '1e400', offset: 1201 },
    ];
    const lines = entries.map((e) => `{"key":${JSON.stringify(e.key)},"value":${e.value},"offset":${e.offset},"ts":1}`);
    const sha256 = createHash('sha256').update(lines.map((line) => `${line}\n`).join('')).digest('hex');
    const trailer = { end: true, offset: 1201, count: entries.length, epoch: 'crafted', digest: digestHex(digestOf(entries)), sha256 };
    const file = join(target.t.dir, 'crafted.ndjson');
    writeFileSync(file, `${[...lines, JSON.stringify(trailer)].join('\n')}\n`);

    const result = await cli(['restore', file, '--force'], target.env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/the restore failed \(invalid_request: .*\); the server was put back to the keys it held before/);
    expect(await stateOf(target.client)).toEqual(before);
    const lease = (await target.client.get('mine/2'))!.expiresAt!;
    expect(lease - leaseBefore).toBeGreaterThanOrEqual(0);
    expect(lease - leaseBefore).toBeLessThan(5_000);
  });
});
