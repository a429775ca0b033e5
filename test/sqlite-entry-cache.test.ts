// The SQLite store keeps the hottest live entries in memory, for get() and for a write's
// look at a key's state: a cached entry must never outlive the key's next write,
// deletion, or a write that rolled back.
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import type { WriteOp, WriteRequest } from '../src/store/log-store.js';
import type { SqliteStore } from '../src/store/sqlite/store.js';
import { tempDir } from './support/helpers.js';
import { outcomeOf, write } from './support/store-helpers.js';
import { openSqliteStore } from './support/store-access.js';

let store: SqliteStore;
afterEach(async () => {
  await store.close();
});

describe('the entry cache of get()', () => {
  it('follows every write, delete and refused batch of a key it holds', async () => {
    store = openSqliteStore(join(tempDir(), 'statelog.db'));
    const now = Date.now();
    await write(store, [{ op: 'set', key: 'a', value: '1' }], now);
    expect(await store.get('a')).toMatchObject({ value: '1', offset: 1 });
    // Cached now: a second read is the same entry.
    expect(await store.get('a')).toMatchObject({ value: '1', offset: 1 });

    await write(store, [{ op: 'set', key: 'a', value: '2' }], now);
    expect(await store.get('a')).toMatchObject({ value: '2', offset: 2 });

    await write(store, [{ op: 'incr', key: 'n', by: 5 }], now);
    expect(await store.get('n')).toMatchObject({ value: '5' });
    await write(store, [{ op: 'incr', key: 'n', by: 1 }], now);
    expect(await store.get('n')).toMatchObject({ value: '6' });

    // A batch that fails on its second item writes nothing: the first key keeps its value.
    const refused = await write(store, [
      { op: 'set', key: 'a', value: '3' },
      { op: 'set', key: 'b', value: '1', ifOffset: 99 },
    ], now);
    expect(refused.ok).toBe(false);
    expect(await store.get('a')).toMatchObject({ value: '2', offset: 2 });

    await write(store, [{ op: 'delete', key: 'a' }], now);
    expect(await store.get('a')).toBeNull();
    await write(store, [{ op: 'set', key: 'a', value: '4' }], now);
    expect(await store.get('a')).toMatchObject({ value: '4' });
  });

  it('takes back only the refused request of a group, whose earlier ops it had cached', async () => {
    store = openSqliteStore(join(tempDir(), 'statelog.db'));
    const request = (ops: WriteOp[]): WriteRequest => ({ ops });
    const results = await store.commit(
      [
        request([{ op: 'set', key: 'a', value: '5' }]),
        request([
          { op: 'set', key: 'a', value: '6' },
          { op: 'incr', key: 'a', by: 1 },
          { op: 'set', key: 'b', value: '1', ifOffset: 99 },
        ]),
        request([{ op: 'incr', key: 'a', by: 10 }]),
      ],
      Date.now(),
    );
    expect(results.map((result) => outcomeOf(result).ok)).toEqual([true, false, true]);
    expect(await store.get('a')).toMatchObject({ value: '15', offset: 2 });
    expect(await store.get('b')).toBeNull();
  });

  it('forgets every key of a group whose transaction rolled back', async () => {
    const path = join(tempDir(), 'statelog.db');
    store = openSqliteStore(path);
    await write(store, [{ op: 'set', key: 'a', value: '1' }]);
    // Another connection's trigger fails the group's transaction at its second request.
    const other = new Database(path);
    other.exec("CREATE TRIGGER fail_b BEFORE INSERT ON log WHEN new.key = 'b' BEGIN SELECT RAISE(ABORT, 'writing b failed'); END");
    const failing: WriteRequest = { ops: [{ op: 'set', key: 'b', value: '1' }] };
    const plain: WriteRequest = { ops: [{ op: 'set', key: 'a', value: '2' }] };
    await expect(store.commit([plain, failing], Date.now())).rejects.toThrow('writing b failed');
    other.exec('DROP TRIGGER fail_b');
    other.close();
    expect(await store.get('a')).toMatchObject({ value: '1', offset: 1 });
    expect(await store.get('b')).toBeNull();
    // The next write sees the state the database kept.
    expect(await write(store, [{ op: 'incr', key: 'a', by: 1 }])).toMatchObject({ ok: true, applied: [{ offset: 2, value: 2 }] });
  });

  it('serves values too large to cache straight from the database', async () => {
    store = openSqliteStore(join(tempDir(), 'statelog.db'));
    const big = JSON.stringify('x'.repeat(100_000));
    await write(store, [{ op: 'set', key: 'big', value: big }], Date.now());
    expect((await store.get('big'))?.value).toBe(big);
    await write(store, [{ op: 'set', key: 'big', value: '1' }], Date.now());
    expect((await store.get('big'))?.value).toBe('1');
  });
});
