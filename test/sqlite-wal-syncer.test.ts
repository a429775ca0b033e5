// The WAL syncer behind STATELOG_SYNC=full on SQLite: commits are answered, and shown to
// readers, only after an fsync that started after them; fsyncs overlap, up to a bound,
// and commits that land meanwhile share the next one; a failed fsync fails every later write.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FileHandle } from 'node:fs/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SqliteStore } from '../src/store/sqlite/store.js';
import { LOOP_FSYNC_MAX_MS, MAX_IN_FLIGHT, WalSyncer } from '../src/store/sqlite/wal-syncer.js';
import { tempDir } from './support/helpers.js';
import { write } from './support/store-helpers.js';

/**
 * A datasync whose background fsyncs wait until the test lets them finish, and whose
 * fsyncs on the event loop are counted (and fail while `nowFailure` is set).
 */
function heldDatasync() {
  const pending: { release(): void; fail(err: Error): void }[] = [];
  const held = {
    pending,
    calls: () => pending.length,
    nowCalls: 0,
    nowFailure: null as Error | null,
    /** How long an fsync on the event loop takes (it blocks, as a real one does). */
    nowDelayMs: 0,
    datasync: {
      inBackground: (_file: FileHandle) => new Promise<void>((resolve, reject) => pending.push({ release: resolve, fail: reject })),
      now: (_fd: number) => {
        held.nowCalls += 1;
        const until = performance.now() + held.nowDelayMs;
        while (performance.now() < until);
        if (held.nowFailure) throw held.nowFailure;
      },
    },
    /** Resolves once the n-th fsync has started (opening the file takes real I/O first). */
    async started(n: number): Promise<void> {
      await vi.waitFor(() => expect(pending.length).toBeGreaterThanOrEqual(n));
    },
  };
  return held;
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

  /** A syncer whose WAL is open: its first fsync (which opens the file) has ended. */
  async function openSyncerAt(initialHead: number) {
    const { held, head } = syncerAt(initialHead);
    const first = syncer.through(initialHead);
    await held.started(1);
    held.pending[0]!.release();
    await first;
    return { held, head };
  }

  it('fsyncs a lone commit on the event loop when no fsync runs, before through() returns', async () => {
    const { held, head } = await openSyncerAt(1);
    head.value = 2;
    const waiting = syncer.through(2, 'lone commit');
    // Already done, synchronously: no background fsync was started.
    expect(held.nowCalls).toBe(1);
    expect(syncer.covers(2)).toBe(true);
    await waiting;
    expect(held.calls()).toBe(1);
  });

  it('fsyncs a lone commit on the event loop even while an earlier fsync runs on the pool', async () => {
    const { held, head } = await openSyncerAt(1);
    head.value = 2;
    // Not alone (a group, or a reader): to the thread pool, where the test holds it.
    const group = syncer.through(2);
    await held.started(2);
    head.value = 3;
    const lone = syncer.through(3, 'lone commit');
    // Covered at once, by an fsync that started after both commits; the group waiting on
    // the pool's fsync is answered too, without waiting for it to end.
    expect(held.nowCalls).toBe(1);
    expect(syncer.covers(3)).toBe(true);
    await Promise.all([lone, group]);
    expect(held.calls()).toBe(2);
    held.pending[1]!.release();
  });

  it('fsyncs a group commit on the event loop while those fsyncs are short, on the pool once they average more than LOOP_FSYNC_MAX_MS', async () => {
    const { held, head } = await openSyncerAt(1);
    head.value = 2;
    await syncer.through(2, 'group commit');
    expect([held.nowCalls, held.calls()]).toEqual([1, 1]);
    // A slow disk: every fsync on the loop now takes longer than the limit.
    held.nowDelayMs = LOOP_FSYNC_MAX_MS + 2;
    for (let n = 0; n < 10; n++) {
      head.value += 1;
      await syncer.through(head.value, 'lone commit');
    }
    head.value += 1;
    const group = syncer.through(head.value, 'group commit');
    await held.started(2);
    expect(held.nowCalls).toBe(11);
    held.pending[1]!.release();
    await group;
    // A lone commit stays on the loop, keeping the average up to date.
    head.value += 1;
    await syncer.through(head.value, 'lone commit');
    expect(held.nowCalls).toBe(12);
  });

  it('fails a lone commit, and every later wait, when its fsync on the event loop fails', async () => {
    const { held, head } = await openSyncerAt(1);
    held.nowFailure = new Error('EIO: i/o error, fdatasync');
    head.value = 2;
    await expect(syncer.through(2, 'lone commit')).rejects.toThrow(/fsync of the write-ahead log failed: EIO/);
    expect(syncer.covers(2)).toBe(false);
    head.value = 3;
    await expect(syncer.through(3)).rejects.toThrow(/EIO/);
    expect(held.calls()).toBe(1);
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
  /** Runs `test` on a store whose fsyncs the test holds; closes it after. */
  async function withHeldStore(test: (store: SqliteStore, held: ReturnType<typeof heldDatasync>) => Promise<void>): Promise<void> {
    const held = heldDatasync();
    const store = new SqliteStore({ path: join(tempDir(), 'statelog.db'), sync: 'full', idempotencyTtlMs: 60_000, datasync: held.datasync });
    try {
      await test(store, held);
    } finally {
      for (const p of held.pending) p.release();
      await store.close();
    }
  }

  it('answers a write, and shows it to readers, only once its fsync has returned', () =>
    withHeldStore(async (store, held) => {
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
    }));

  it('fsyncs a commit on the event loop once the WAL is open, whether of one request or several', () =>
    withHeldStore(async (store, held) => {
      // The first fsync opens the WAL, off the event loop.
      const first = write(store, [{ op: 'set', key: 'a', value: '1' }], Date.now());
      await held.started(1);
      held.pending[0]!.release();
      await first;
      expect(await write(store, [{ op: 'set', key: 'a', value: '2' }], Date.now())).toMatchObject({ ok: true });
      expect([held.nowCalls, held.calls()]).toEqual([1, 1]);
      await store.commit(
        [1, 2].map((n) => ({ ops: [{ op: 'set' as const, key: `g${n}`, value: String(n) }] })),
        Date.now(),
      );
      expect([held.nowCalls, held.calls()]).toEqual([2, 1]);
    }));

  it('refuses writes and fails the health check after a failed fsync', () =>
    withHeldStore(async (store, held) => {
      const writing = write(store, [{ op: 'set', key: 'a', value: '1' }], Date.now());
      await held.started(1);
      held.pending[0]!.fail(new Error('EIO: i/o error'));
      await expect(writing).rejects.toThrow(/fsync of the write-ahead log failed/);
      await expect(write(store, [{ op: 'set', key: 'b', value: '1' }], Date.now())).rejects.toThrow(/EIO/);
      await expect(store.ping()).rejects.toThrow(/EIO/);
    }));

  it('tells its owner once, at the first failed fsync, so that the process can stop', async () => {
    const held = heldDatasync();
    const fatal: Error[] = [];
    const store = new SqliteStore({
      path: join(tempDir(), 'statelog.db'),
      sync: 'full',
      idempotencyTtlMs: 60_000,
      datasync: held.datasync,
      onFatal: (err) => fatal.push(err),
    });
    try {
      const writing = write(store, [{ op: 'set', key: 'a', value: '1' }], Date.now());
      await held.started(1);
      held.pending[0]!.fail(new Error('EIO: i/o error'));
      await expect(writing).rejects.toThrow(/fsync of the write-ahead log failed/);
      await expect(write(store, [{ op: 'set', key: 'b', value: '1' }], Date.now())).rejects.toThrow(/EIO/);
      await settled();
      expect(fatal.map((err) => err.message)).toEqual(['fsync of the write-ahead log failed: EIO: i/o error']);
    } finally {
      await store.close();
    }
  });
});
