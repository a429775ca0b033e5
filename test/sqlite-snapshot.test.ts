// The store's live-key pages: JSON rendered by SQLite must be exactly what render.ts
// renders, pages must walk every key once in byte order, and a closed reader must say so.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
