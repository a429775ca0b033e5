// Property: whatever the interleaving of writes, snapshots, change reads (any limit,
// any prefix) and removals of superseded records, for every snapshot offset N,
// snapshot(N) + changes(after N) = the current state; offsets strictly increase; no
// reader sees a record twice. FC_RUNS sets the number of runs (default 300, 100 on
// PostgreSQL, where each request is a round trip to the database).
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import {
  applyRecords,
  baseUrl,
  plain,
  readAllChanges,
  readSnapshot,
  stateOf,
  writeBatch,
  type ChangesAnswer,
  type State,
} from './support/stream-clients.js';

const RUNS = Number(process.env.FC_RUNS ?? (TEST_STORE === 'postgres' ? 100 : 300));

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
});
afterAll(async () => {
  await t.close();
});

const SUBPREFIXES = ['', 'x/', 'y/', 'x/a'];
const KEYS = ['x/a', 'x/ab', 'x/b', 'y/a', 'y/b', 'z'];

type Op = { op: 'set'; key: number; value: number } | { op: 'delete'; key: number } | { op: 'incr'; key: number; by: number };
type Action =
  | { type: 'write'; ops: Op[] }
  | { type: 'snapshot'; prefix: number }
  | { type: 'newReader'; prefix: number }
  | { type: 'read'; reader: number; limit: number }
  | { type: 'compact'; share: number };

const key = fc.nat({ max: KEYS.length - 1 });
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('set' as const), key, value: fc.integer({ min: -5, max: 5 }) }),
  fc.record({ op: fc.constant('delete' as const), key }),
  fc.record({ op: fc.constant('incr' as const), key, by: fc.integer({ min: -3, max: 3 }) }),
);
const prefix = fc.nat({ max: SUBPREFIXES.length - 1 });
const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ type: fc.constant('write' as const), ops: fc.array(op, { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('snapshot' as const), prefix }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('newReader' as const), prefix }) },
  { weight: 3, arbitrary: fc.record({ type: fc.constant('read' as const), reader: fc.nat(), limit: fc.integer({ min: 1, max: 5 }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('compact' as const), share: fc.double({ min: 0, max: 1, noNaN: true }) }) },
);

interface Reader {
  prefix: string;
  position: number;
  state: State;
  seen: Set<number>;
}

/** Removes a share of the superseded records, oldest first, as the compactor would. */
async function removeSuperseded(share: number): Promise<void> {
  const superseded = await t.database.supersededOffsets();
  await t.database.removeRecords(superseded.slice(0, Math.ceil(superseded.length * share)));
}

const only = (state: State, p: string): State => new Map([...state].filter(([k]) => k.startsWith(p)));

let run = 0;
let lastOffset = 0;

it('snapshot(N) + changes(after N) = current state, offsets increase, no record twice', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 30 }), async (actions) => {
      // Each run has keys of its own, so runs share one server without seeing each other.
      const ns = `r${run++}/`;
      const model: State = new Map();
      const snapshots: { offset: number; prefix: string; state: State }[] = [];
      const readers: Reader[] = [{ prefix: ns, position: lastOffset, state: new Map(), seen: new Set() }];

      for (const a of actions) {
        if (a.type === 'write') {
          const items = a.ops.map((o) => ({ ...o, key: ns + KEYS[o.key]! }));
          const answer = await writeBatch(base, items);
          if (answer.status !== 200) continue;
          answer.body.records.forEach((written, i) => {
            expect(written.offset).toBe(lastOffset + 1);
            lastOffset = written.offset;
            const item = items[i]!;
            if (item.op === 'delete') model.delete(item.key);
            else model.set(item.key, JSON.stringify(item.op === 'incr' ? written.value : item.value));
          });
        } else if (a.type === 'snapshot') {
          const p = ns + SUBPREFIXES[a.prefix]!;
          const snapshot = await readSnapshot(base, p);
          expect(snapshot.offset).toBe(lastOffset);
          const state = stateOf(snapshot.entries);
          expect(plain(state)).toEqual(plain(only(model, p)));
          snapshots.push({ offset: snapshot.offset, prefix: p, state });
        } else if (a.type === 'newReader') {
          const p = ns + SUBPREFIXES[a.prefix]!;
          const snapshot = await readSnapshot(base, p);
          readers.push({ prefix: p, position: snapshot.offset, state: stateOf(snapshot.entries), seen: new Set() });
        } else if (a.type === 'read') {
          const reader = readers[a.reader % readers.length]!;
          const q = `after=${reader.position}&limit=${a.limit}&prefix=${encodeURIComponent(reader.prefix)}`;
          const page = (await (await fetch(`${base}/v1/changes?${q}`)).json()) as ChangesAnswer;
          let last = reader.position;
          for (const record of page.records) {
            expect(record.offset).toBeGreaterThan(last);
            expect(record.key.startsWith(reader.prefix)).toBe(true);
            expect(reader.seen.has(record.offset)).toBe(false);
            reader.seen.add(record.offset);
            last = record.offset;
          }
          expect(page.next).toBe(page.records.length === a.limit ? last : page.head);
          applyRecords(reader.state, page.records);
          reader.position = page.next;
        } else {
          await removeSuperseded(a.share);
        }
      }

      for (const snapshot of snapshots) {
        const changes = await readAllChanges(base, snapshot.offset, snapshot.prefix, 3);
        const rebuilt = applyRecords(new Map(snapshot.state), changes);
        expect(plain(rebuilt)).toEqual(plain(only(model, snapshot.prefix)));
      }
      for (const reader of readers) {
        for (const record of await readAllChanges(base, reader.position, reader.prefix, 4)) {
          expect(reader.seen.has(record.offset)).toBe(false);
          reader.seen.add(record.offset);
          applyRecords(reader.state, [record]);
        }
        expect(plain(reader.state)).toEqual(plain(only(model, reader.prefix)));
      }
    }),
    { numRuns: RUNS },
  );
}, 600_000);
