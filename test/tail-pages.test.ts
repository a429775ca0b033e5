// The pages shared by change streams at the head: a read that failed (the database out
// of reach for a moment) must not be handed to the next reader as if it were the page.
// (The reader here is behind the tail window, which has not read yet: the store answers.)
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import type { ChangesPage, LogStore } from '../src/store/log-store.js';
import { ReaderGone, ReadTurns } from '../src/feed/read-turns.js';
import { TailPages } from '../src/feed/tail-pages.js';
import { TailWindow } from '../src/feed/tail-window.js';

/** The slice of a store that TailPages reads, failing the first `failures` reads. */
function flakyStore(failures: number): LogStore & { reads: number } {
  const store = {
    reads: 0,
    position: () => ({ head: 5, horizon: 0, epoch: 'e' }),
    async readChanges(): Promise<ChangesPage> {
      store.reads += 1;
      if (store.reads <= failures) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      return { records: [{ offset: 5, key: 'k', op: 'set', value: '1', ts: 0 }], head: 5, horizon: 0, full: false, examined: 5 };
    },
  };
  return store as unknown as LogStore & { reads: number };
}

describe('TailPages', () => {
  const query = { after: 4, prefix: '', limit: 10, maxChars: 1000 };

  it('shares one read among readers at the same offset while the head is unchanged', async () => {
    const store = flakyStore(0);
    const tail = new TailPages(store, new TailWindow(store, new ReadTurns()), (records) => records.map((r) => r.offset).join());
    const [a, b] = await Promise.all([tail.read(query), tail.read(query)]);
    expect([a.text, b.text, store.reads]).toEqual(['5', '5', 1]);
  });

  it('reads again after a failed read, at the same head', async () => {
    const store = flakyStore(1);
    const tail = new TailPages(store, new TailWindow(store, new ReadTurns()), (records) => records.map((r) => r.offset).join());
    await expect(tail.read(query)).rejects.toThrow('ECONNREFUSED');
    expect((await tail.read(query)).text).toBe('5');
    expect(store.reads).toBe(2);
  });

  it('reads for a reader that joined when the one who asked first went away', async () => {
    const store = flakyStore(0);
    const tail = new TailPages(store, new TailWindow(store, new ReadTurns()), (records) => records.map((r) => r.offset).join());
    const first = tail.read(query, () => true);
    const joiner = tail.read(query, () => false);
    expect([(await first).text, (await joiner).text, store.reads]).toEqual(['5', '5', 1]);
  });

  it('skips the store when every reader sharing the read went away', async () => {
    const store = flakyStore(0);
    const tail = new TailPages(store, new TailWindow(store, new ReadTurns()), (records) => records.map((r) => r.offset).join());
    const reads = [tail.read(query, () => true), tail.read(query, () => true)];
    for (const read of reads) await expect(read).rejects.toBeInstanceOf(ReaderGone);
    expect(store.reads).toBe(0);
  });

  it('holds no reader once its page is read: a page shared while the head stays keeps no request', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const store = flakyStore(0);
    const tail = new TailPages(store, new TailWindow(store, new ReadTurns()), (records) => records.map((r) => r.offset).join());
    await tail.read(query);
    let joined: WeakRef<object> | undefined;
    await (async () => {
      const request = { socket: new Array(1000).fill(0) };
      joined = new WeakRef(request);
      await tail.read(query, () => request.socket.length === 0);
    })();
    await new Promise((resolve) => setTimeout(resolve, 0));
    gc();
    expect(joined!.deref()).toBeUndefined();
  });
});
