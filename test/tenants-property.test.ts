// Property: for random scopes and random writes, what a token with key prefixes reads
// from the keys listing, the snapshot, the changes and the stream (with and without its
// snapshot) is what an unscoped reader reads, restricted to the keys with those
// prefixes: the same entries and records, in the same order, with none missing. The
// scopes are put in force as SIGHUP does (the authenticator's replaceFile).
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { parseTokenFile } from '../src/token-file.js';
import { startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import { baseUrl, SseClient, type WireRecord } from './support/stream-clients.js';
import { fileEntries, type TestToken } from './support/token-file.js';

const RUNS = Number(process.env.FC_RUNS ?? (TEST_STORE === 'postgres' ? 15 : 30));

const ROOT: TestToken = { name: 'root', secret: 'root-secret', role: 'admin' };
const PREFIXES = ['a', 'a/', 'a/b/', 'b/', 'ab', 'é/', 'z/9'];
const KEYS = ['a', 'a/1', 'a/b/2', 'a/bc', 'ab', 'abc', 'b/x', 'b/', 'é/1', 'é', 'z/9', 'z/10', 'zz'];

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_TOKENS: `admin:${ROOT.secret}` });
  base = baseUrl(t.app);
});
afterAll(() => t.close());

const auth = (secret: string) => ({ authorization: `Bearer ${secret}` });

async function getJson<T>(path: string, secret: string): Promise<T> {
  const res = await fetch(`${base}${path}`, { headers: auth(secret) });
  expect(res.status, `${path}: ${await res.clone().text()}`).toBe(200);
  return (await res.json()) as T;
}

interface Entry {
  key: string;
  value: unknown;
  offset: number;
}

async function snapshot(secret: string): Promise<{ entries: Entry[]; trailer: { count: number; digest: string; offset: number } }> {
  const res = await fetch(`${base}/v1/snapshot`, { headers: auth(secret) });
  const lines = (await res.text()).trim().split('\n').map((line) => JSON.parse(line) as Entry & { count: number; digest: string });
  const trailer = lines.pop()!;
  return { entries: lines.map(({ key, value, offset }) => ({ key, value, offset })), trailer };
}

async function listAll(secret: string): Promise<Entry[]> {
  const items: Entry[] = [];
  let cursor: string | null = null;
  do {
    const page: { items: Entry[]; cursor: string | null } = await getJson(`/v1/keys?limit=2${cursor ? `&cursor=${cursor}` : ''}`, secret);
    items.push(...page.items.map(({ key, value, offset }) => ({ key, value, offset })));
    cursor = page.cursor;
  } while (cursor !== null);
  return items;
}

async function changesAll(secret: string, limit: number): Promise<WireRecord[]> {
  const records: WireRecord[] = [];
  let after = 0;
  for (;;) {
    const page: { records: WireRecord[]; next: number; head: number } = await getJson(`/v1/changes?after=${after}&limit=${limit}`, secret);
    records.push(...page.records);
    expect(page.next).toBeGreaterThanOrEqual(after);
    after = page.next;
    if (after >= page.head) return records;
  }
}

/** The stream's records up to `head`: from 0, or its snapshot then what follows. */
async function streamed(secret: string, head: number, withSnapshot: boolean): Promise<{ snapshot: WireRecord[]; live: WireRecord[] }> {
  const client = await SseClient.connect(`${base}/v1/changes/stream?${withSnapshot ? 'snapshot=true' : 'after=0'}`, auth(secret));
  try {
    const reached = (events: { id: string | undefined }[]) => events.some((event) => event.id !== undefined && Number(event.id) >= head);
    if (withSnapshot) await client.until((events) => events.some((event) => event.event === 'snapshot-end'));
    else if (head > 0) await client.until(reached);
    const end = client.events.findIndex((event) => event.event === 'snapshot-end');
    const records = (from: number, to: number) => client.events.slice(from, to).filter((e) => e.event === 'record').map((e) => JSON.parse(e.data) as WireRecord);
    return withSnapshot ? { snapshot: records(0, end), live: [] } : { snapshot: [], live: records(0, client.events.length) };
  } finally {
    client.close();
  }
}

type Write = { op: 'set'; key: number; value: number } | { op: 'delete'; key: number };
const write: fc.Arbitrary<Write> = fc.oneof(
  fc.record({ op: fc.constant('set' as const), key: fc.nat({ max: KEYS.length - 1 }), value: fc.integer({ min: 0, max: 99 }) }),
  fc.record({ op: fc.constant('delete' as const), key: fc.nat({ max: KEYS.length - 1 }) }),
);
const scope = fc.uniqueArray(fc.constantFrom(...PREFIXES), { minLength: 1, maxLength: 3 });

let run = 0;

it('a scoped reader reads the whole log restricted to its prefixes', async () => {
  await fc.assert(
    fc.asyncProperty(scope, fc.array(write, { minLength: 1, maxLength: 12 }), fc.integer({ min: 1, max: 4 }), async (prefixes, writes, limit) => {
      run += 1;
      for (const w of writes) {
        const key = encodeURIComponent(KEYS[w.key]!);
        const init =
          w.op === 'set'
            ? { method: 'PUT', body: JSON.stringify({ value: w.value }), headers: { ...auth(ROOT.secret), 'content-type': 'application/json' } }
            : { method: 'DELETE', headers: auth(ROOT.secret) };
        const res = await fetch(`${base}/v1/keys/${key}`, init);
        expect([200, 404]).toContain(res.status);
        await res.arrayBuffer();
      }
      const reader: TestToken = { name: `reader-${run}`, secret: `reader-secret-${run}`, role: 'read', prefixes };
      t.app.authenticator!.replaceFile(parseTokenFile(JSON.stringify(fileEntries([reader]))));
      const mine = (key: string) => prefixes.some((prefix) => key.startsWith(prefix));

      const full = await snapshot(ROOT.secret);
      const state = full.entries.filter((entry) => mine(entry.key));
      const scoped = await snapshot(reader.secret);
      expect(scoped.entries).toEqual(state);
      expect(scoped.trailer).toMatchObject({ offset: full.trailer.offset, count: state.length, digest: digestHex(digestOf(state)) });
      expect(await listAll(reader.secret)).toEqual(state);

      const log = (await changesAll(ROOT.secret, 1000)).filter((record) => mine(record.key));
      expect(await changesAll(reader.secret, limit)).toEqual(log);
      expect((await streamed(reader.secret, full.trailer.offset, false)).live).toEqual(log);
      const fromSnapshot = (await streamed(reader.secret, full.trailer.offset, true)).snapshot;
      expect(fromSnapshot.map(({ key, value, offset }) => ({ key, value, offset }))).toEqual(state);
    }),
    { numRuns: RUNS },
  );
});
