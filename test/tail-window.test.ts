// The tail window (src/feed/tail-window.ts) against the app's real store: any page it
// answers from memory is the page the store gives for the same query, whatever the
// position, filter, scope and limit, also once its oldest records were dropped; readers
// at the head are answered from memory; a reader below the horizon still gets its 410.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFeed, type FeedQuery } from '../src/feed/change-feed.js';
import { ReadTurns } from '../src/feed/read-turns.js';
import { TailWindow } from '../src/feed/tail-window.js';
import { startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import { baseUrl, writeBatch } from './support/stream-clients.js';

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
});
afterAll(async () => {
  await t.close();
});

const KEYS = ['a/1', 'a/2', 'a/23', 'b/1', 'b/2', 'c'];
const FILTERS: Pick<FeedQuery, 'prefix' | 'key' | 'within'>[] = [
  { prefix: '' },
  { prefix: 'a/' },
  { prefix: 'a/2' },
  { prefix: '', key: 'b/1' },
  { prefix: '', within: ['a/2', 'b/'] },
];

async function metric(name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

const head = () => t.app.services.store.position().head;

describe('the tail window', () => {
  it('answers every query within it with the page the store gives, also after dropping its oldest records', async () => {
    const store = t.app.services.store;
    const turns = new ReadTurns();
    const windows = [new TailWindow(store, turns), new TailWindow(store, turns, { limits: { records: 7, chars: 1_000_000 } })];
    // Both start at the head now: what they hold is written from here on.
    const from = head();
    for (const window of windows) await window.read({ after: from, prefix: '', limit: 10, maxChars: 1_000_000 });
    const runs = TEST_STORE === 'postgres' ? 15 : 40;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ key: fc.constantFrom(...KEYS), value: fc.option(fc.integer({ min: 0, max: 99 }), { nil: null }), big: fc.boolean() }), { minLength: 1, maxLength: 6 }),
        fc.array(fc.record({ back: fc.nat(40), filter: fc.nat(FILTERS.length - 1), limit: fc.integer({ min: 1, max: 6 }), maxChars: fc.constantFrom(5, 1_000_000) }), { minLength: 1, maxLength: 8 }),
        async (writes, reads) => {
          const records = writes.map(({ key, value, big }) => (value === null ? { key, op: 'delete' } : { key, value: big ? 'x'.repeat(20) : value }));
          // A batch whose delete finds no live key is refused as a whole: that is fine here.
          await writeBatch(base, records);
          for (const { back, filter, limit, maxChars } of reads) {
            const query: FeedQuery = { after: Math.max(from, head() - back), ...FILTERS[filter]!, limit, maxChars };
            await expectSamePages(query);
          }
        },
      ),
      { numRuns: runs },
    );
    // Every position the windows may hold, the one just past the oldest record dropped included.
    for (let after = from; after <= head(); after++) {
      for (const filter of FILTERS) await expectSamePages({ after, ...filter, limit: 4, maxChars: 1_000_000 });
    }

    async function expectSamePages(query: FeedQuery): Promise<void> {
      const expected = await readFeed(turns, store, query);
      for (const window of windows) {
        const page = await window.read(query);
        expect(page.records.map((r) => `${r.offset} ${r.key} ${r.op} ${r.value}`)).toEqual(expected.records.map((r) => `${r.offset} ${r.key} ${r.op} ${r.value}`));
        // PostgreSQL's store tells a page cut by maxChars at its last record from a full
        // one and goes on to the scan's end; the window, as SQLite's, stops at the record.
        const cutAtLast = TEST_STORE === 'postgres' && page.next === page.records.at(-1)?.offset && expected.next > page.next;
        expect([cutAtLast ? expected.next : page.next, page.head]).toEqual([expected.next, expected.head]);
      }
    }
  });

  it('answers the readers at the head from memory: a write wakes them with no read of the store each', async () => {
    await writeBatch(base, [{ key: 'head/1', value: 1 }]);
    const at = head();
    // The first reads may set the window up; what follows comes from it.
    await (await fetch(`${base}/v1/changes?after=${at}`)).json();
    const fromStore = await metric('statelog_feed_reads_total', 'from="store"');
    const fromWindow = await metric('statelog_feed_reads_total', 'from="window"');
    const polls = Array.from({ length: 20 }, (_, i) => fetch(`${base}/v1/changes?after=${at}&wait=10&prefix=${i % 2 ? 'head/' : ''}`).then((res) => res.json()));
    await new Promise((resolve) => setTimeout(resolve, 200));
    await writeBatch(base, [{ key: 'head/2', value: 2 }]);
    const pages = (await Promise.all(polls)) as { records: { key: string }[] }[];
    expect(pages.every((page) => page.records.map((r) => r.key).join() === 'head/2')).toBe(true);
    expect(await metric('statelog_feed_reads_total', 'from="store"')).toBe(fromStore);
    expect(await metric('statelog_feed_reads_total', 'from="window"')).toBeGreaterThan(fromWindow);
  });

  it('still answers 410 offset_compacted to a reader in the window but below the horizon', async () => {
    const store = t.app.services.store;
    const window = new TailWindow(store, new ReadTurns());
    const from = head();
    await window.read({ after: from, prefix: '', limit: 10, maxChars: 1_000_000 });
    await writeBatch(base, [{ key: 'gone/1', value: 1 }, { key: 'gone/1', op: 'delete' }, { key: 'gone/2', value: 2 }]);
    expect((await window.read({ after: from, prefix: '', limit: 10, maxChars: 1_000_000 })).records).toHaveLength(3);
    await t.database.setHorizon(from + 2);
    await expect(new TailWindow(store, new ReadTurns()).read({ after: from, prefix: '', limit: 10, maxChars: 1_000_000 })).rejects.toMatchObject({ code: 'offset_compacted' });
    await expect(window.read({ after: from, prefix: '', limit: 10, maxChars: 1_000_000 })).rejects.toMatchObject({ code: 'offset_compacted' });
  });
});
