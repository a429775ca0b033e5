// The store's live-key pages: JSON rendered by SQLite must be exactly what render.ts
// renders, pages must walk every key once in byte order, and a closed reader must say so.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../harness/server-process.js';
import { entryJson, recordJson } from '../src/contract/render.js';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, writeBatch } from './support/stream-clients.js';

let t: TestApp;
const keys = ['a', 'a/', 'a/"quoted"', 'a/back\\slash', 'a/é', 'a/😀', 'a/\u2028', 'a/ﬀ', 'b', 'a/ /spaced', 'ab', 'a/z'];
const values: unknown[] = [1, -2.5e-7, 'text with "quotes" and \\ and é', null, true, [], {}, { nested: [1, { x: 'y' }] }, 9007199254740991, 'b', 0, ''];

beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  await writeBatch(baseUrl(t.app), keys.map((key, i) => ({ key, value: values[i] })));
  await writeBatch(baseUrl(t.app), [{ key: 'b', op: 'delete' }]);
});
afterAll(async () => {
  await t.close();
});

const run = (command: string, args: string[]) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(command, args, { cwd: ROOT, timeout: 20_000 }, (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }));
  });

const byteOrder = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

async function readAll(prefix: string, max: number, maxChars?: number, shape: 'entry' | 'record' = 'entry') {
  const reader = await t.app.services.store.openSnapshot(prefix);
  const pages: string[][] = [];
  for (let page = await reader.nextJson(shape, max, maxChars); page.length > 0; page = await reader.nextJson(shape, max, maxChars)) {
    pages.push(page);
  }
  reader.close();
  return pages;
}

describe('SnapshotReader.nextJson', () => {
  it('renders each live key exactly as entryJson and recordJson do', async () => {
    const store = t.app.services.store;
    const live = keys.filter((k) => k !== 'b').sort(byteOrder);
    const entries = await Promise.all(live.map(async (key) => (await store.get(key))!));
    expect((await readAll('', 100)).flat()).toEqual(entries.map(entryJson));
    expect((await readAll('', 100, undefined, 'record')).flat()).toEqual(entries.map((e) => recordJson({ ...e, op: 'set' })));
  });

  it('walks every key of a prefix once, in byte order, whatever the page size', async () => {
    const expected = keys.filter((k) => k.startsWith('a/')).sort(byteOrder);
    for (const max of [1, 2, 5, 100]) {
      const pages = await readAll('a/', max);
      expect(pages.every((p) => p.length <= max)).toBe(true);
      expect(pages.flat().map((line) => JSON.parse(line).key)).toEqual(expected);
    }
    // A key equal to the prefix belongs to it.
    expect((await readAll('a', 100)).flat().map((line) => JSON.parse(line).key)[0]).toBe('a');
  });

  it('ends a page early at maxChars, keeping at least one key', async () => {
    const pages = await readAll('a/', 100, 1);
    expect(pages.every((p) => p.length === 1)).toBe(true);
    expect(pages.length).toBe(keys.filter((k) => k.startsWith('a/')).length);
  });

  it('walks every key once when the page limits change from page to page (the page read ahead is read again)', async () => {
    const expected = keys.filter((k) => k.startsWith('a/')).sort(byteOrder);
    const reader = await t.app.services.store.openSnapshot('a/');
    const seen: string[] = [];
    const limits: [number, number | undefined][] = [[1, undefined], [3, undefined], [3, 1], [2, undefined], [1, undefined], [100, undefined]];
    for (let i = 0; ; i++) {
      const [max, maxChars] = limits[i % limits.length]!;
      const page = await reader.nextJson(i % 2 ? 'record' : 'entry', max, maxChars);
      if (page.length === 0) break;
      seen.push(...page.map((line) => JSON.parse(line).key));
    }
    reader.close();
    expect(seen).toEqual(expected);
  });

  it('keeps a process that reads a snapshot alive until it is done, and lets it exit after', async () => {
    // The snapshots' worker thread must not be what keeps a process running, nor let it
    // end while a page or the store's close is awaited (node exits 13 then).
    const dir = mkdtempSync(join(tmpdir(), 'statelog-snapshot-exit-'));
    try {
      const script = join(dir, 'read.mts');
      writeFileSync(
        script,
        `import { fillLog } from ${JSON.stringify(join(ROOT, 'harness/fill-log.ts'))};
import { SqliteStore } from ${JSON.stringify(join(ROOT, 'src/store/sqlite/store.ts'))};
const path = ${JSON.stringify(join(dir, 'db.sqlite'))};
fillLog(path, { records: 30, keys: 3 });
const store = new SqliteStore({ path, sync: 'normal', idempotencyTtlMs: 1000 });
const reader = await store.openSnapshot('');
let lines = 0;
for (let page = await reader.nextJson('entry', 1); page.length > 0; page = await reader.nextJson('entry', 1)) lines += page.length;
reader.close();
await store.close();
console.log('read', lines);
`,
      );
      const { code, stdout, stderr } = await run(process.execPath, ['--import', 'tsx', script]);
      expect({ code, stdout: stdout.trim() }, stderr).toEqual({ code: 0, stdout: 'read 3' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('throws once closed rather than look finished', async () => {
    const reader = await t.app.services.store.openSnapshot('');
    expect(await reader.nextJson('entry', 1)).toHaveLength(1);
    reader.close();
    await expect(reader.nextJson('entry', 1)).rejects.toThrow(/closed/);
  });
});

describe('GET /v1/keys paging (the same live-key query)', () => {
  it('visits every key once with cursors, and a cursor from another prefix does not widen the range', async () => {
    const base = baseUrl(t.app);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const query: string = `prefix=a%2F&limit=3${cursor ? `&cursor=${cursor}` : ''}`;
      const page = (await (await fetch(`${base}/v1/keys?${query}`)).json()) as { items: { key: string }[]; cursor: string | null };
      seen.push(...page.items.map((i) => i.key));
      cursor = page.cursor;
    } while (cursor);
    expect(seen).toEqual(keys.filter((k) => k.startsWith('a/')).sort(byteOrder));

    const belowPrefix = Buffer.from('a').toString('base64url');
    const page = (await (await fetch(`${base}/v1/keys?prefix=a%2F&cursor=${belowPrefix}`)).json()) as { items: { key: string }[] };
    expect(page.items.map((i) => i.key)).toEqual(keys.filter((k) => k.startsWith('a/')).sort(byteOrder));
  });
});

describe('SnapshotReader.nextChunk (the text a snapshot sends)', () => {
  it('holds exactly the lines of nextJson, in pages SQLite builds whole and in pages of large values read as lines', async () => {
    const base = baseUrl(t.app);
    const small = Array.from({ length: 5000 }, (_, i) => ({ key: `c/${String(i).padStart(5, '0')}${i % 9 === 0 ? '/é😀"' : ''}`, value: { n: i, s: 'é'.repeat(i % 7) } }));
    for (let i = 0; i < small.length; i += 1000) expect((await writeBatch(base, small.slice(i, i + 1000))).status).toBe(200);
    // Large values side by side mid-way, and at the end: their pages hold more bytes than one built whole.
    for (const i of [2500, 2501, 2502, 4999]) expect((await writeBatch(base, [{ key: small[i]!.key, value: 'x'.repeat(300_000) }])).status).toBe(200);
    await writeBatch(base, [{ key: small[10]!.key, op: 'delete' }]);

    for (const shape of ['entry', 'record'] as const) {
      const expected = (await readAll('c/', 1000, undefined, shape)).flat();
      expect(expected).toHaveLength(4999);
      const reader = await t.app.services.store.openSnapshot('c/');
      const parts: Buffer[] = [];
      let count = 0;
      for (let chunk = await reader.nextChunk!(shape); chunk.text.length > 0; chunk = await reader.nextChunk!(shape)) {
        parts.push(Buffer.from(chunk.text));
        count += chunk.count;
      }
      reader.close();
      expect(count).toBe(expected.length);
      expect(Buffer.concat(parts).toString('utf8')).toBe(`${expected.join('\n')}\n`);
    }
  });
});
