// The tail window (src/feed/tail-window.ts) against the app's real store: any page it
// answers from memory is the page the store gives for the same query, whatever the
// position, filter, scope and limit, also once its oldest records were dropped; readers
// at the head are answered from memory; a reader below the horizon still gets its 410; followers
// at different positions get every record once past its limits; and what it may show after compaction.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFeed, type FeedQuery } from '../src/feed/change-feed.js';
import { ReadTurns } from '../src/feed/read-turns.js';
import { TailWindow } from '../src/feed/tail-window.js';
import type { StoredRecord } from '../src/store/log-store.js';
import { startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import { applyRecords, baseUrl, plain, readAllChanges, readSnapshot, stateOf, writeBatch } from './support/stream-clients.js';

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

  it('answers from memory in its turn with the reads of the store, never ahead of the requests waiting', async () => {
    const store = t.app.services.store;
    const turns = new ReadTurns();
    const window = new TailWindow(store, turns);
    const from = head();
    await window.read({ after: from, prefix: '', limit: 10, maxChars: 1_000_000 });
    await writeBatch(base, [{ key: 'turn/1', value: 1 }]);
    await window.read({ after: from, prefix: '', limit: 10, maxChars: 1_000_000 });
    // The window holds the record: this read needs no refresh, and still waits for its turn.
    const reading = window.read({ after: from, prefix: 'turn/', limit: 10, maxChars: 1_000_000 });
    expect(turns.waiting).toBe(1);
    expect((await reading).records.map((record) => record.key)).toEqual(['turn/1']);
    expect(turns.waiting).toBe(0);
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

// The window dropping its oldest records past its record and byte limits while followers read
// at different positions (some at the head, some falling behind it and back to the store).
interface Follower {
  after: number;
  seen: number[];
  /** Pages it reads after each write: 0 falls behind, many keep up. */
  pagesPerRound: number;
  prefix: string;
  limit: number;
}

describe('the tail window under followers at different positions', () => {
  it('gives each follower every record once, in order, past the record and byte limits', async () => {
    const store = t.app.services.store;
    const turns = new ReadTurns();
    // Small limits: the window drops records every few writes, by count or by bytes.
    const reads = { window: 0, store: 0 };
    const window = new TailWindow(store, turns, { limits: { records: 12, chars: 600 }, onRead: (from) => (reads[from] += 1) });
    const start = store.position().head;
    await window.read({ after: start, prefix: '', limit: 10, maxChars: 1_000_000 });
    const followers: Follower[] = [
      { after: start, seen: [], pagesPerRound: 50, prefix: '', limit: 3 },
      { after: start, seen: [], pagesPerRound: 1, prefix: '', limit: 2 },
      { after: start, seen: [], pagesPerRound: 1, prefix: 'e/', limit: 1 },
      { after: start, seen: [], pagesPerRound: 0, prefix: '', limit: 5 },
      { after: start, seen: [], pagesPerRound: 2, prefix: 'o/', limit: 4 },
    ];
    const readPage = async (follower: Follower): Promise<boolean> => {
      const query: FeedQuery = { after: follower.after, prefix: follower.prefix, limit: follower.limit, maxChars: 1_000_000 };
      const page = await window.read(query);
      follower.seen.push(...page.records.map((record) => record.offset));
      const moved = page.next > follower.after;
      follower.after = page.next;
      return moved && page.next < page.head;
    };
    for (let round = 0; round < 60; round++) {
      const records = Array.from({ length: 1 + (round % 4) }, (_, i) => {
        const n = round * 4 + i;
        return { key: `${n % 2 ? 'o' : 'e'}/${n % 7}`, value: n % 5 === 0 ? 'x'.repeat(90) : n };
      });
      expect((await writeBatch(base, records)).status).toBe(200);
      for (const follower of followers) {
        for (let page = 0; page < follower.pagesPerRound; page++) if (!(await readPage(follower))) break;
      }
    }
    // Every follower reads on to the head.
    for (const follower of followers) while (await readPage(follower));

    const all: StoredRecord[] = (await readFeed(turns, store, { after: start, prefix: '', limit: 10_000, maxChars: 10_000_000 })).records;
    for (const follower of followers) {
      const expected = all.filter((record) => record.key.startsWith(follower.prefix)).map((record) => record.offset);
      expect(follower.seen, `follower ${follower.prefix || '(all)'} limit ${follower.limit}`).toEqual(expected);
    }
    // Both paths were taken: the window answered, and so did the store for those it had dropped.
    expect(reads.window).toBeGreaterThan(0);
    expect(reads.store).toBeGreaterThan(0);
  });
});

// What a reader of the window may see once compaction has removed records it holds: only records
// superseded by a later record of their key (which the reader reads too), never a removed delete
// marker (a reader at or past the horizon is after it), so a snapshot at N plus the records after
// N, from the window or the store, still equals the state (docs/reads.md). Last: it compacts the log.
const historyOffsets = async (key: string): Promise<number[]> => {
  const res = await fetch(`${base}/v1/keys/${encodeURIComponent(key)}/history?limit=1000`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { records: { offset: number }[] }).records.map((record) => record.offset);
};

describe('the tail window after compaction', () => {
  it('gives a snapshot at N plus the records after N that equal the state, superseded records included', async () => {
    await writeBatch(base, [{ key: 'gone', value: 0 }, { key: 'kept', value: 0 }]);
    await writeBatch(base, [{ key: 'gone', op: 'delete' }]);
    const snapshot = await readSnapshot(base);
    // The window starts at the head of its first read: from here on it holds every record.
    await readAllChanges(base, snapshot.offset);
    for (let i = 0; i < 30; i++) {
      await writeBatch(base, [
        { key: `k/${i % 3}`, value: i },
        { key: `d/${i % 4}`, value: i },
        ...(i % 5 === 4 ? [{ key: `d/${i % 4}`, op: 'delete' }] : []),
      ]);
    }
    const read = await readAllChanges(base, snapshot.offset);

    const compact = await fetch(`${base}/v1/admin/compact`, { method: 'POST' });
    expect(compact.status).toBe(200);
    const { removed, horizon } = (await compact.json()) as { removed: number; horizon: number };
    expect(removed).toBeGreaterThan(0);
    // Delete markers are kept (the retention): a removed one would raise the horizon past N, and a
    // reader at N would get 410 from the window as from the store (the test above).
    expect(horizon).toBeLessThanOrEqual(snapshot.offset);

    // A commit since: the pages kept at the head are gone, the window answers, not the store.
    await writeBatch(base, [{ key: 'later', value: 1 }]);
    const storeBefore = await metric('statelog_feed_reads_total', 'from="store"');
    const again = await readAllChanges(base, snapshot.offset);
    expect(await metric('statelog_feed_reads_total', 'from="store"')).toBe(storeBefore);

    const kept = new Set((await Promise.all(['k/0', 'k/1', 'k/2', 'd/0', 'd/1', 'd/2', 'd/3', 'later'].map(historyOffsets))).flat());
    const removedShown = again.filter((record) => !kept.has(record.offset));
    // The window served records the store no longer has: each is superseded by a later record of its key.
    expect(removedShown.length).toBeGreaterThan(0);
    for (const record of removedShown) expect(again.some((later) => later.key === record.key && later.offset > record.offset)).toBe(true);
    expect(again.map((record) => record.offset)).toEqual([...read.map((record) => record.offset), again.at(-1)!.offset]);

    const state = await readSnapshot(base);
    expect(plain(applyRecords(stateOf(snapshot.entries), again))).toEqual(plain(stateOf(state.entries)));
    // A reader of the store alone (what the store gives after N) reaches the same state.
    const kepts = again.filter((record) => kept.has(record.offset));
    expect(plain(applyRecords(stateOf(snapshot.entries), kepts))).toEqual(plain(stateOf(state.entries)));
  });
});
