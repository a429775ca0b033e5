// What an Idempotency-Key remembers is the write's outcome, tagged with its version, and
// a replay gives the outcome back for the route to render as it renders a fresh one. An
// answer remembered rendered (before outcomes were) replays as it was, until it expires.
import { describe, expect, it } from 'vitest';
import type { WriteRequest } from '../src/store/log-store.js';
import { planWrites, type RememberedAnswer, type StateSource } from '../src/store/write-plan.js';

const request: WriteRequest = { ops: [{ op: 'set', key: 'a', value: '1' }], idempotency: { key: 'k', fingerprint: 'f' } };

function source(remembered?: RememberedAnswer): StateSource {
  return {
    state: () => undefined,
    liveValue: () => {
      throw new Error('no value is read');
    },
    remembered: () => remembered,
  };
}

const plan = (from: StateSource) => planWrites({ requests: [request], head: 0, now: 1000, idempotencyTtlMs: 60_000 }, from);

describe('remembered answers', () => {
  it('replay the outcome first decided, with nothing appended', () => {
    const first = plan(source());
    expect(first.results).toEqual([{ outcome: { ok: true, applied: [{ key: 'a', offset: 1 }] }, replayed: false, appended: 1 }]);
    const replay = plan(source(first.remember.get('k')));
    expect(replay.results).toEqual([{ outcome: { ok: true, applied: [{ key: 'a', offset: 1 }] }, replayed: true, appended: 0 }]);
    expect(replay.records).toEqual([]);
  });

  it('replay an answer remembered rendered as it was', () => {
    const answer = { status: 200, headers: { etag: '"7"' }, body: '{"key":"a","offset":7}' };
    const replay = plan(source({ fingerprint: 'f', answer: JSON.stringify(answer), expiresAt: 2000 }));
    expect(replay.results).toEqual([{ answer, replayed: true, appended: 0 }]);
  });

  it('refuse the key with another request as an outcome', () => {
    const reused = plan(source({ fingerprint: 'other', answer: '{}', expiresAt: 2000 }));
    expect(reused.results).toEqual([{ outcome: { ok: false, failure: { code: 'idempotency_key_reused' } }, replayed: false, appended: 0 }]);
  });
});
