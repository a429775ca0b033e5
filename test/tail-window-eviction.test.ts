// The tail window dropping its oldest records past its record and byte limits while followers
// read at different positions (some at the head, some falling behind it and back to the store):
// each follower gets every record once, in order, as the store has them: no gap, no duplicate.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFeed, type FeedQuery } from '../src/feed/change-feed.js';
import { ReadTurns } from '../src/feed/read-turns.js';
import { TailWindow } from '../src/feed/tail-window.js';
import type { StoredRecord } from '../src/store/log-store.js';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, writeBatch } from './support/stream-clients.js';

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
});
afterAll(() => t.close());

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
