// Several statelog processes on one PostgreSQL database: offsets in commit order as seen
// by readers on every node, no false offset_ahead from a node that has not yet heard of
// another's commit, per-node metrics, no lost update across nodes, and a node killed
// mid-load (writers and long-poll readers move to the others). Some readers follow the
// log through each node's own store code (readChanges, woken by the head watch), as the
// /v1/changes route does; others are HTTP clients of the nodes.
import parsePrometheus from 'parse-prometheus-text-format';
import { afterEach, describe, expect, it } from 'vitest';
import type { StoredRecord } from '../../src/store/log-store.js';
import type { PgStore } from '../../src/store/postgres/store.js';
import { SseClient, type WireRecord } from '../support/stream-clients.js';
import { outcomeOf } from '../support/store-helpers.js';
import { checkFollowers, fixture, follow, http, NO_SHEDDING, sleep, type Fixture, type ReadPage } from './fixtures.js';

let f: Fixture | undefined;
afterEach(async () => {
  await f?.cleanup();
  f = undefined;
});

interface Acked {
  offset: number;
  key: string;
  /** JSON text of the value. */
  value: string;
}

/** /metrics of a node, parsed: the samples of unlabelled metrics, by name. */
async function scrapeMetrics(url: string): Promise<Map<string, number>> {
  const res = await fetch(`${url}/metrics`);
  expect(res.status).toBe(200);
  const families = parsePrometheus(await res.text());
  return new Map(families.filter((family) => family.metrics.length === 1).map((family) => [family.name, Number(family.metrics[0]!.value)]));
}

/** A record as /v1/changes sends it, as the store keeps it (the value as JSON text). */
const fromWire = (r: WireRecord): StoredRecord => ({
  offset: r.offset,
  key: r.key,
  op: r.op,
  value: r.op === 'set' ? JSON.stringify(r.value) : null,
  ts: r.ts,
});

const storeReader =
  (store: PgStore): ReadPage =>
  (after, limit) =>
    store.readChanges({ after, prefix: '', limit });

/** Writes PUTs and 3-record batches to `url` until `until`; returns what was acknowledged. */
async function writeUntil(url: string, name: string, until: number): Promise<Acked[]> {
  const acked: Acked[] = [];
  for (let i = 0; Date.now() < until; i++) {
    if (i % 4 === 3) {
      const records = [0, 1, 2].map((j) => ({ key: `${name}/b${i}-${j}`, value: { w: name, i, j } }));
      const answer = await http(url, 'POST', '/v1/records', { records });
      expect(answer.status).toBe(200);
      answer.body.records.forEach((r: { key: string; offset: number }, j: number) =>
        acked.push({ offset: r.offset, key: r.key, value: JSON.stringify(records[j]!.value) }),
      );
    } else {
      const key = `${name}/k${i % 50}`;
      const answer = await http(url, 'PUT', `/v1/keys/${encodeURIComponent(key)}`, { value: i });
      expect(answer.status).toBe(200);
      acked.push({ offset: answer.body.offset, key, value: String(i) });
    }
  }
  return acked;
}

describe('offsets in commit order across nodes', () => {
  it('every reader on every node sees every acknowledged write once, in the same order, with no gap', async () => {
    f = await fixture();
    const nodes = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);
    // One reader beside each node: its own store (connections, notifications).
    const readers = await Promise.all(nodes.map(() => f!.open()));
    let finalHead: number | null = null;
    const following = readers.map((store) =>
      follow(storeReader(store), () => finalHead, (wake) => store.watchHead(wake)),
    );

    const until = Date.now() + 4000;
    const writes = await Promise.all(
      nodes.flatMap((node, n) => Array.from({ length: 8 }, (_, w) => writeUntil(node.url, `n${n}w${w}`, until))),
    );
    const acked = writes.flat();
    finalHead = Math.max(...acked.map((a) => a.offset));
    const seen = await Promise.all(following);

    // Thousands of commits from 24 writers on three nodes (the harness, not PostgreSQL, limits the rate).
    expect(acked.length).toBeGreaterThan(300);
    expect(checkFollowers(seen, acked)).toEqual({ missing: 0, repeatedOrUnordered: 0, disagreeing: 0 });
    // Nothing but acknowledged writes was committed, so the log is exactly 1..head.
    expect(seen[0]!.map((r) => r.offset)).toEqual(Array.from({ length: finalHead }, (_, i) => i + 1));
    expect(acked.length).toBe(finalHead);
  }, 60_000);

  it('a naive sequence fails the same check: a reader passes an offset that commits later', async () => {
    f = await fixture();
    const setup = await f.connect();
    await setup.query('CREATE SEQUENCE naive_seq; CREATE TABLE naive_log (seq bigint PRIMARY KEY, key text, value text)');
    const writers = await Promise.all(Array.from({ length: 6 }, () => f!.connect()));
    const readerConnections = await Promise.all([f.connect(), f.connect()]);

    // Offsets from nextval(), committed whenever each transaction happens to finish.
    const acked: Acked[] = [];
    let stop = false;
    const naiveWriter = async (client: (typeof writers)[number], w: number) => {
      for (let i = 0; !stop; i++) {
        await client.query('BEGIN');
        const { rows } = await client.query<{ seq: string }>("SELECT nextval('naive_seq') AS seq");
        const seq = Number(rows[0]!.seq);
        await client.query('INSERT INTO naive_log VALUES ($1, $2, $3)', [seq, `w${w}`, String(i)]);
        await client.query('SELECT pg_sleep(random() * 0.003)');
        await client.query('COMMIT');
        acked.push({ offset: seq, key: `w${w}`, value: String(i) });
      }
    };
    // The head a naive reader has: the highest offset it can see.
    const naiveReader =
      (client: (typeof readerConnections)[number]): ReadPage =>
      async (after, limit) => {
        const { rows } = await client.query<{ seq: string; key: string; value: string }>(
          'SELECT seq, key, value FROM naive_log WHERE seq > $1 ORDER BY seq LIMIT $2',
          [after, limit],
        );
        const records: StoredRecord[] = rows.map((r) => ({ offset: Number(r.seq), key: r.key, op: 'set', value: r.value, ts: 0 }));
        return { records, head: records.length > 0 ? records[records.length - 1]!.offset : after };
      };

    let finalHead: number | null = null;
    const following = readerConnections.map((client) => follow(naiveReader(client), () => finalHead));
    const running = writers.map((client, w) => naiveWriter(client, w));
    await sleep(1500);
    stop = true;
    await Promise.all(running);
    finalHead = Math.max(...acked.map((a) => a.offset));
    const seen = await Promise.all(following);

    const report = checkFollowers(seen, acked);
    expect(report.missing).toBeGreaterThan(0);
    // The rows are all there: only the readers lost them.
    const { rows } = await setup.query<{ n: string }>('SELECT count(*) AS n FROM naive_log');
    expect(Number(rows[0]!.n)).toBe(acked.length);
  }, 30_000);

  it('two connections: with a sequence 11 commits before 10; with the meta row the second waits', async () => {
    f = await fixture();
    const setup = await f.connect();
    await setup.query('CREATE SEQUENCE naive_seq; CREATE TABLE naive_log (seq bigint PRIMARY KEY)');
    const [a, b, reader] = [await f.connect(), await f.connect(), await f.connect()];

    await a.query('BEGIN');
    await a.query("INSERT INTO naive_log VALUES (nextval('naive_seq'))"); // 1, not committed
    await b.query('BEGIN');
    await b.query("INSERT INTO naive_log VALUES (nextval('naive_seq'))"); // 2
    await b.query('COMMIT');
    const firstRead = await reader.query('SELECT seq FROM naive_log WHERE seq > 0 ORDER BY seq');
    expect(firstRead.rows.map((r) => Number(r.seq))).toEqual([2]); // the reader moves on to after=2
    await a.query('COMMIT');
    const secondRead = await reader.query('SELECT seq FROM naive_log WHERE seq > 2 ORDER BY seq');
    expect(secondRead.rows).toEqual([]); // offset 1 is never seen

    // The store: a transaction holding the meta row (as a write on another node does)
    // keeps every other write waiting until it commits, so offsets commit in order.
    const store = await f.open();
    await a.query('BEGIN');
    await a.query('UPDATE meta SET head = head + 1, records = records + 1, state_keys = state_keys + 1, live_keys = live_keys + 1');
    await a.query("INSERT INTO log VALUES (1, 'first', 'set', '1', 0)");
    await a.query("INSERT INTO state VALUES ('first', 1, true)");
    let committed = false;
    const second = store
      .commit([{ ops: [{ op: 'set', key: 'second', value: '2' }] }], Date.now())
      .then((results) => {
        committed = true;
        return results;
      });
    await sleep(300);
    expect(committed).toBe(false);
    const meanwhile = await reader.query('SELECT seq FROM log');
    expect(meanwhile.rows).toEqual([]);
    await a.query('COMMIT');
    const [result] = await second;
    expect(outcomeOf(result)).toMatchObject({ ok: true, applied: [{ offset: 2 }] });
  });
});

describe('a node that has not yet heard of another node\'s commit', () => {
  it('never answers 410 offset_ahead for an offset that another node acknowledged', async () => {
    f = await fixture();
    const [a, b] = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);
    const refused: string[] = [];
    for (let i = 0; i < 150; i++) {
      const { offset } = (await http(a.url, 'PUT', `/v1/keys/k${i % 10}`, { value: i })).body as { offset: number };
      // At once on B, which learns of A's commit only by a notification.
      const [poll, stream, resumed] = await Promise.all([
        http(b.url, 'GET', `/v1/changes?after=${offset}`),
        SseClient.open(`${b.url}/v1/changes/stream?after=${offset}`),
        SseClient.open(`${b.url}/v1/changes/stream?after=0`, { 'last-event-id': String(offset) }),
      ]);
      if (poll.status !== 200) refused.push(`changes after=${offset}: ${poll.status} ${JSON.stringify(poll.body)}`);
      expect(poll.body.next).toBeGreaterThanOrEqual(offset);
      const streams: SseClient[] = [];
      for (const [name, opened] of [['stream after', stream], ['stream Last-Event-ID', resumed]] as const) {
        if (opened instanceof SseClient) streams.push(opened);
        else refused.push(`${name}=${offset}: ${opened.status} ${opened.body}`);
      }
      // The open streams go on from there: the next write on A is their first record.
      const next = (await http(a.url, 'PUT', '/v1/keys/next', { value: i })).body.offset as number;
      for (const open of streams) {
        await open.until((events) => events.some((e) => e.event !== 'progress'));
        expect(open.events.filter((e) => e.event !== 'progress')[0]).toMatchObject({ id: String(next), event: 'record' });
        open.close();
      }
    }
    expect(refused).toEqual([]);
  }, 60_000);
});

describe('metrics on several nodes', () => {
  it("counts in statelog_records_written_total the records this node appended, and reads the log's gauges from the shared store", async () => {
    f = await fixture();
    const [a, b] = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);
    // Both nodes write at once, so each learns of the other's commits while its own are
    // in flight: sets, batches of three, deletes, and writes that are refused (a delete
    // of a key already deleted, an If-Match that does not hold) and write nothing.
    const until = Date.now() + 2500;
    const writer = async (url: string, name: string) => {
      let appended = 0;
      for (let i = 0; Date.now() < until; i++) {
        const records = [0, 1, 2].map((j) => ({ key: `${name}/b${i % 7}-${j}`, value: i }));
        const answers = await Promise.all([
          http(url, 'PUT', `/v1/keys/${name}-k${i % 5}`, { value: i }),
          http(url, 'POST', '/v1/records', { records }),
          http(url, 'DELETE', `/v1/keys/${name}-k${(i + 2) % 5}`),
          http(url, 'PUT', `/v1/keys/${name}-k0`, { value: i }, { 'if-match': '"1"' }),
        ]);
        for (const answer of answers) if (answer.status === 200) appended += answer.body.records?.length ?? 1;
      }
      return appended;
    };
    const appended = await Promise.all([writer(a.url, 'a'), writer(a.url, 'a2'), writer(b.url, 'b'), writer(b.url, 'b2')]);
    const scrapes = await Promise.all([a, b].map((node) => scrapeMetrics(node.url)));
    const stats = (await http(a.url, 'GET', '/v1/stats')).body;

    expect(Math.min(appended[0]! + appended[1]!, appended[2]! + appended[3]!)).toBeGreaterThan(100);
    expect(scrapes.map((m) => m.get('statelog_records_written_total'))).toEqual([
      appended[0]! + appended[1]!,
      appended[2]! + appended[3]!,
    ]);
    // The nodes together wrote the whole log (nothing was compacted).
    expect(stats.head).toBe(appended.reduce((x, y) => x + y));
    for (const metrics of scrapes) {
      expect(metrics.get('statelog_log_head')).toBe(stats.head);
      expect(metrics.get('statelog_log_records')).toBe(stats.records);
      expect(metrics.get('statelog_live_keys')).toBe(stats.liveKeys);
      expect(metrics.get('statelog_tombstones')).toBe(stats.tombstones);
    }
  }, 60_000);
});

describe('no lost update across nodes', () => {
  it('increments and compare-and-set loops racing on three nodes lose nothing', async () => {
    f = await fixture();
    const nodes = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);

    const incrValues: number[] = [];
    const incrementer = async (url: string) => {
      for (let i = 0; i < 15; i++) {
        const answer = await http(url, 'POST', '/v1/records', { records: [{ key: 'counter', op: 'incr', by: 1 }] });
        expect(answer.status).toBe(200);
        incrValues.push(answer.body.records[0].value);
      }
    };
    const casOffsets: number[] = [];
    let conflicts = 0;
    const casser = async (url: string) => {
      for (let done = 0; done < 8; ) {
        const current = await http(url, 'GET', '/v1/keys/cas');
        const [value, offset] = current.status === 404 ? [0, null] : [current.body.value as number, current.body.offset as number];
        const condition: Record<string, string> = offset === null ? { 'if-none-match': '*' } : { 'if-match': `"${offset}"` };
        const answer = await http(url, 'PUT', '/v1/keys/cas', { value: value + 1 }, condition);
        if (answer.status === 412) {
          conflicts += 1;
          continue;
        }
        expect(answer.status).toBe(200);
        casOffsets.push(answer.body.offset);
        done += 1;
      }
    };
    await Promise.all(nodes.flatMap((node) => [...Array.from({ length: 4 }, () => incrementer(node.url)), ...Array.from({ length: 3 }, () => casser(node.url))]));

    // 3 nodes x 4 clients x 15 increments, each answered with a distinct new total.
    expect((await http(nodes[0]!.url, 'GET', '/v1/keys/counter')).body.value).toBe(180);
    expect([...incrValues].sort((x, y) => x - y)).toEqual(Array.from({ length: 180 }, (_, i) => i + 1));
    // 3 nodes x 3 clients x 8 successful compare-and-sets.
    expect((await http(nodes[1]!.url, 'GET', '/v1/keys/cas')).body.value).toBe(72);
    expect(new Set(casOffsets).size).toBe(72);
    expect(conflicts).toBeGreaterThan(0); // they did race
  }, 60_000);

  it('an Idempotency-Key sent to two nodes at once writes once', async () => {
    f = await fixture();
    const nodes = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);
    for (let round = 0; round < 10; round++) {
      const send = (url: string) =>
        http(url, 'POST', '/v1/records', { records: [{ key: 'paid', op: 'incr', by: 5 }] }, { 'idempotency-key': `pay-${round}` });
      const answers = await Promise.all(nodes.map((node) => send(node.url)));
      expect(answers.map((a) => a.status)).toEqual([200, 200]);
      expect(answers[0]!.body).toEqual(answers[1]!.body);
      expect(answers.filter((a) => a.headers.get('idempotent-replayed') === 'true')).toHaveLength(1);
    }
    expect((await http(nodes[0]!.url, 'GET', '/v1/keys/paid')).body.value).toBe(50);
  }, 30_000);
});

describe('a node killed mid-load', () => {
  it('the others go on, clients move to them, and no acknowledged write is lost', async () => {
    f = await fixture();
    const nodes = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);
    const victim = nodes[0]!;
    const acked: (Acked & { at: number })[] = [];
    let stop = false;
    let movedClients = 0;

    // Each client starts on one node and moves to the next one when its node is gone.
    const client = async (c: number) => {
      let target = c % nodes.length;
      for (let i = 0; !stop; i++) {
        const key = `c${c}/k${i}`;
        try {
          const answer = await http(nodes[target]!.url, 'PUT', `/v1/keys/${encodeURIComponent(key)}`, { value: i });
          if (answer.status === 200) acked.push({ offset: answer.body.offset, key, value: String(i), at: Date.now() });
        } catch {
          target = (target + 1) % nodes.length;
          movedClients += 1;
        }
      }
    };
    const running = Array.from({ length: 12 }, (_, c) => client(c));
    await sleep(1500);
    victim.proc.kill('SIGKILL');
    const killedAt = Date.now();
    expect((await victim.exited).signal).toBe('SIGKILL');
    await sleep(1500);
    stop = true;
    await Promise.all(running);

    expect(movedClients).toBeGreaterThanOrEqual(4);
    expect(acked.filter((a) => a.at > killedAt + 200).length).toBeGreaterThan(100);
    // Every acknowledged write is in the log, at its offset, read from a survivor's database.
    const store = await f.open();
    const byOffset = new Map((await follow(storeReader(store), () => store.position().head)).map((r) => [r.offset, r]));
    const lost = acked.filter((a) => byOffset.get(a.offset)?.key !== a.key || byOffset.get(a.offset)?.value !== a.value);
    expect(lost).toEqual([]);
    // The killed node's open transaction (if any) was rolled back: the survivors still write.
    expect((await http(nodes[1]!.url, 'PUT', '/v1/keys/after', { value: 1 })).status).toBe(200);
  }, 60_000);

  it("its long-poll clients resume on another node from their last `next`, and read every acknowledged write exactly once, in order", async () => {
    f = await fixture();
    const [a, b] = await Promise.all([f.spawn(NO_SHEDDING), f.spawn(NO_SHEDDING)]);
    const acked: Acked[] = [];
    let stopWriters = false;
    // Writers on both nodes; those on A move to B once A is gone. A write cut by the kill
    // was never acknowledged (it may or may not be in the log).
    const writer = async (w: number) => {
      let node = w % 2 ? b : a;
      for (let i = 0; !stopWriters; i++) {
        const key = `w${w}/k${i % 20}`;
        try {
          const answer = await http(node.url, 'PUT', `/v1/keys/${encodeURIComponent(key)}`, { value: i });
          expect(answer.status).toBe(200);
          acked.push({ offset: answer.body.offset, key, value: String(i) });
        } catch (err) {
          if (node === b) throw err;
          node = b;
        }
      }
    };
    // Long-poll clients on A; each moves to B when its request to A fails, and goes on
    // from the `next` of the last page it received.
    let finalHead: number | null = null;
    const poller = async () => {
      const seen: StoredRecord[] = [];
      let node = a;
      let after = 0;
      let resumedAt: number | null = null;
      while (finalHead === null || after < finalHead) {
        let page: { status: number; body: { records: WireRecord[]; next: number } };
        try {
          page = await http(node.url, 'GET', `/v1/changes?after=${after}&limit=50&wait=2`);
        } catch (err) {
          if (node === b) throw err;
          node = b;
          resumedAt = after;
          continue;
        }
        expect(page.status).toBe(200);
        seen.push(...page.body.records.map(fromWire));
        after = page.body.next;
      }
      return { seen, resumedAt };
    };

    const writers = Array.from({ length: 6 }, (_, w) => writer(w));
    const pollers = Array.from({ length: 6 }, () => poller());
    await sleep(1500);
    a.proc.kill('SIGKILL');
    const killedAt = acked.length;
    expect((await a.exited).signal).toBe('SIGKILL');
    await sleep(1500);
    stopWriters = true;
    await Promise.all(writers);
    finalHead = (await http(b.url, 'GET', '/v1/stats')).body.head as number;
    const polled = await Promise.all(pollers);

    // The whole log, read from offset 0 on the survivor (nothing was compacted).
    const log: StoredRecord[] = [];
    for (let after = 0; after < finalHead; ) {
      const page = await http(b.url, 'GET', `/v1/changes?after=${after}&limit=1000`);
      log.push(...(page.body.records as WireRecord[]).map(fromWire));
      after = page.body.next;
    }
    expect(log.map((r) => r.offset)).toEqual(Array.from({ length: finalHead }, (_, i) => i + 1));
    expect(acked.length - killedAt).toBeGreaterThan(50); // writes went on after the kill
    for (const { seen, resumedAt } of polled) {
      // Each client was on A when it died, had read part of the log there, and resumed on B.
      expect(resumedAt).toBeGreaterThan(0);
      expect(resumedAt).toBeLessThan(finalHead);
      expect(seen).toEqual(log);
    }
    // No acknowledged write is lost: each is in the log at its offset.
    expect(checkFollowers([log], acked)).toEqual({ missing: 0, repeatedOrUnordered: 0, disagreeing: 0 });
  }, 60_000);
});
