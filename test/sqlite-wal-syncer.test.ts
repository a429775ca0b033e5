// The WAL syncer behind STATELOG_SYNC=full on SQLite: commits are answered, and shown to
// readers, only after an fsync that started after them; fsyncs overlap, up to a bound,
// and commits that land meanwhile share the next one; a failed fsync fails every later write.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FileHandle } from 'node:fs/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SqliteStore } from '../src/store/sqlite-store.js';
import { MAX_IN_FLIGHT, WalSyncer } from '../src/store/wal-syncer.js';
import { tempDir } from './helpers.js';
import { write } from './store-helpers.js';

/** A datasync that waits until the test lets it finish. */
function heldDatasync() {
  const pending: { release(): void; fail(err: Error): void }[] = [];
  return {
    pending,
    calls: () => pending.length,
    datasync: (_file: FileHandle) => new Promise<void>((resolve, reject) => pending.push({ release: resolve, fail: reject })),
    /** Resolves once the n-th fsync has started (opening the file takes real I/O first). */
    async started(n: number): Promise<void> {
      await vi.waitFor(() => expect(pending.length).toBeGreaterThanOrEqual(n));
    },
  };
}

/** Lets every promise and I/O callback that can run, run. */
const settled = () => new Promise((resolve) => setTimeout(resolve, 20));

describe('WalSyncer', () => {
  let syncer: WalSyncer;
  afterEach(async () => {
    await syncer?.close();
  });

  /** A syncer on a new WAL whose latest commit is `head.value`, with fsyncs the test holds. */
  function syncerAt(initialHead: number) {
    const held = heldDatasync();
    const head = { value: initialHead };
    const wal = join(tempDir(), 'statelog.db-wal');
    writeFileSync(wal, '');
    syncer = new WalSyncer(wal, () => head.value, held.datasync);
    return { held, head };
  }

  it('resolves only after an fsync that started after the commit', async () => {
    const { held, head } = syncerAt(5);
    let done = false;
    const waiting = syncer.through(5).then(() => (done = true));
    await held.started(1);
    await settled();
    expect(held.calls()).toBe(1);
    expect(done).toBe(false);
    // A commit while the first fsync runs is not covered by it: its own starts at once.
    head.value = 7;
    let laterDone = false;
    const later = syncer.through(7).then(() => (laterDone = true));
    await held.started(2);
    held.pending[0]!.release();
    await waiting;
    expect(syncer.covers(5)).toBe(true);
    expect(syncer.covers(7)).toBe(false);
    await settled();
    expect(laterDone).toBe(false);
    expect(held.calls()).toBe(2);
    held.pending[1]!.release();
    await later;
    expect(syncer.covers(7)).toBe(true);
  });

  it('counts an fsync that ends before an earlier one for every commit before it started', async () => {
    const { held, head } = syncerAt(3);
    const first = syncer.through(3);
    await held.started(1);
    head.value = 9;
    const second = syncer.through(9);
    await held.started(2);
    held.pending[1]!.release();
    await second;
    expect(syncer.covers(9)).toBe(true);
    await expect(Promise.race([first, settled().then(() => 'waiting')])).resolves.toBeUndefined();
    held.pending[0]!.release();
  });

  it(`runs at most ${MAX_IN_FLIGHT} fsyncs at once, and serves the commits that landed meanwhile with one more`, async () => {
    const { held, head } = syncerAt(1);
    const waits: Promise<void>[] = [];
    for (let offset = 1; offset <= 20; offset++) {
      head.value = offset;
      waits.push(syncer.through(offset));
      await held.started(Math.min(offset, MAX_IN_FLIGHT));
    }
    await settled();
    expect(held.calls()).toBe(MAX_IN_FLIGHT);
    held.pending[0]!.release();
    await held.started(MAX_IN_FLIGHT + 1);
    for (const fsync of held.pending) fsync.release();
    await Promise.all(waits);
    expect(held.calls()).toBe(MAX_IN_FLIGHT + 1);
  });

  it('never waits for an offset beyond the latest commit', async () => {
    const { held } = syncerAt(3);
    const waiting = syncer.through(1_000);
    await held.started(1);
    held.pending[0]!.release();
    await waiting;
    expect(syncer.covers(3)).toBe(true);
  });

  it('fails every later wait once an fsync has failed', async () => {
    const { held, head } = syncerAt(2);
    const waiting = syncer.through(2);
    await held.started(1);
    held.pending[0]!.fail(new Error('EIO: i/o error, fdatasync'));
    await expect(waiting).rejects.toThrow(/fsync of the write-ahead log failed: EIO/);
    expect(() => syncer.check()).toThrow(/EIO/);
    head.value = 3;
    await expect(syncer.through(3)).rejects.toThrow(/EIO/);
    expect(held.calls()).toBe(1);
  });
});

describe('SqliteStore with STATELOG_SYNC=full', () => {
  it('answers a write, and shows it to readers, only once its fsync has returned', async () => {
    const held = heldDatasync();
    const dir = tempDir();
    const store = new SqliteStore({ path: join(dir, 'statelog.db'), sync: 'full', idempotencyTtlMs: 60_000, datasync: held.datasync });
    try {
      // A fresh database: nothing was ever committed, so nothing to wait for.
      expect(await store.get('a')).toBeNull();

      let answered = false;
      const writing = write(store, [{ op: 'set', key: 'a', value: '1' }], Date.now()).then((outcome) => {
        answered = true;
        return outcome;
      });
      await held.started(1);
      let seen = false;
      const reading = store.get('a').then((entry) => {
        seen = true;
        return entry;
      });
      const changes = store.readChanges({ after: 0, prefix: '', limit: 10 });
      await settled();
      expect(answered).toBe(false);
      expect(seen).toBe(false);
      held.pending[0]!.release();
      expect(await writing).toMatchObject({ ok: true, applied: [{ key: 'a', offset: 1 }] });
      expect(await reading).toMatchObject({ key: 'a', value: '1', offset: 1 });
      expect((await changes).records.map((r) => r.offset)).toEqual([1]);
      // Nothing new committed: reads answer at once, without another fsync.
      expect(await store.get('a')).toMatchObject({ offset: 1 });
      expect(held.calls()).toBe(1);
    } finally {
      for (const p of held.pending) p.release();
      await store.close();
    }
  });

  it('refuses writes and fails the health check after a failed fsync', async () => {
    const held = heldDatasync();
    const store = new SqliteStore({ path: join(tempDir(), 'statelog.db'), sync: 'full', idempotencyTtlMs: 60_000, datasync: held.datasync });
    try {
      const writing = write(store, [{ op: 'set', key: 'a', value: '1' }], Date.now());
      await held.started(1);
      held.pending[0]!.fail(new Error('EIO: i/o error'));
      await expect(writing).rejects.toThrow(/fsync of the write-ahead log failed/);
      await expect(write(store, [{ op: 'set', key: 'b', value: '1' }], Date.now())).rejects.toThrow(/EIO/);
      await expect(store.ping()).rejects.toThrow(/EIO/);
    } finally {
      await store.close();
    }
  });
});
