// Group commit: writes arriving together share one transaction, and one request's
// refusal never affects its neighbours.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import type { WriteRequest } from '../src/store/log-store.js';
import { outcomeOf } from './support/store-helpers.js';

let t: TestApp;
let transactions: number[];
beforeEach(async () => {
  t = await startApp();
  // Count the store's commits (each is one SQLite transaction) without changing them.
  const store = t.app.services.store;
  const commit = store.commit.bind(store);
  transactions = [];
  store.commit = (requests, now, onApplied) => {
    transactions.push(requests.length);
    return commit(requests, now, onApplied);
  };
});
afterEach(async () => {
  await t.close();
});

const request = (ops: WriteRequest['ops']): WriteRequest => ({ ops });

describe('group commit', () => {
  it('commits requests submitted in one event-loop turn as one transaction, in arrival order', async () => {
    const { batcher } = t.app.services;
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => batcher.submit(request([{ op: 'set', key: `k${i}`, value: String(i) }]))),
    );
    expect(transactions).toEqual([50]);
    const offsets = results.map((r) => {
      const outcome = outcomeOf(r);
      return outcome.ok ? outcome.applied[0]!.offset : null;
    });
    expect(offsets).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
  });

  it('fails a refused request alone and evaluates conditions in arrival order', async () => {
    const { batcher } = t.app.services;
    const [first, stale, second, missing, third] = await Promise.all([
      batcher.submit(request([{ op: 'set', key: 'k', value: '1', ifAbsent: true }])),
      batcher.submit(request([{ op: 'set', key: 'k', value: '2', ifAbsent: true }])),
      batcher.submit(request([{ op: 'set', key: 'k', value: '3', ifOffset: 1 }])),
      batcher.submit(request([{ op: 'set', key: 'x', value: '1' }, { op: 'delete', key: 'nope' }])),
      batcher.submit(request([{ op: 'incr', key: 'n', by: 1 }])),
    ]);
    expect(transactions).toEqual([5]);
    expect([first, stale, second, missing, third].map((r) => (outcomeOf(r).ok ? 200 : 412))).toEqual([200, 412, 200, 412, 200]);
    expect(outcomeOf(missing)).toMatchObject({ failure: { code: 'not_found', index: 1 } });
    const { store } = t.app.services;
    expect((await store.get('k'))?.value).toBe('3');
    expect(await store.get('x')).toBeNull();
    expect(store.position().head).toBe(3);
  });

});
