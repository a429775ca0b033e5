// Bounded work per read of changes: a filtered page examines at most FEED_SCAN_RECORDS
// offsets and says where it stopped; long polls and streams are capped; `key=` watches
// one key. On a real listening server, as readers reach it.
import { setMaxListeners } from 'node:events';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FEED_SCAN_RECORDS } from '../src/feed/change-feed.js';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, SseClient, writeBatch, type ChangesAnswer } from './support/stream-clients.js';

const LOG_RECORDS = 30_000;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: ChangesAnswer & { error?: { code: string } };
}

/** A GET with node:http; `signal` ends it (and its connection) at once. */
function getJson(url: string, agent?: http.Agent, signal?: AbortSignal): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { agent, signal }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) as Answer['body'] }));
      res.on('error', reject);
    });
    request.on('error', reject);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('a filtered read over a long log', () => {
  let t: TestApp;
  let base: string;
  beforeAll(async () => {
    t = await startApp(
      // The server's own load shedding on, as in production: a stalled event loop shows as 503.
      { STATELOG_SYNC: 'normal', STATELOG_MAX_EVENT_LOOP_DELAY_MS: '1000' },
      { seed: (database) => database.fillLog({ records: LOG_RECORDS, keys: 5000 }) },
    );
    base = baseUrl(t.app);
    // Filling the log held the event loop: wait until the load shedding has seen it free.
    const deadline = Date.now() + 20_000;
    while ((await getJson(`${base}/v1/keys/key-000001`)).status === 503 && Date.now() < deadline) await sleep(200);
  }, 60_000);
  afterAll(async () => {
    await t.close();
  });

  it('examines a bounded stretch of the log and answers next where it stopped, below the head', async () => {
    const { body } = await getJson(`${base}/v1/changes?after=0&prefix=nothing/&wait=5`);
    expect(body.records).toEqual([]);
    expect(body.head).toBeGreaterThanOrEqual(LOG_RECORDS);
    expect(body.next).toBe(FEED_SCAN_RECORDS);
    // Following next reaches the head, a bounded step at a time, each answered at once.
    let after = body.next;
    let pages = 1;
    while (after < body.head) {
      const started = performance.now();
      const page = await getJson(`${base}/v1/changes?after=${after}&prefix=nothing/&wait=1`);
      // Only the read that reaches the head waits there for new records.
      if (page.body.next < page.body.head) expect(performance.now() - started).toBeLessThan(900);
      expect(page.body.next).toBe(Math.min(after + FEED_SCAN_RECORDS, page.body.head));
      after = page.body.next;
      pages += 1;
    }
    expect(pages).toBe(Math.ceil(body.head / FEED_SCAN_RECORDS));
  });

  it('a key= read finds the key\'s records across the log, one bounded stretch at a time', async () => {
    const key = 'key-000007';
    const found: number[] = [];
    let after = 0;
    for (;;) {
      const { status, body } = await getJson(`${base}/v1/changes?after=${after}&key=${key}`);
      expect(status).toBe(200);
      for (const record of body.records) expect(record.key).toBe(key);
      found.push(...body.records.map((r) => r.offset));
      after = body.next;
      if (after >= body.head) break;
    }
    const all = await t.app.services.store.readChanges({ after: 0, prefix: key, limit: 100_000 });
    expect(found).toEqual(all.records.filter((r) => r.key === key).map((r) => r.offset));
    expect(found.length).toBeGreaterThan(0);
  });

  it('300 filtered long polls from offset 0 leave plain GETs fast, under writes', async () => {
    // The probe's connection is open before the readers connect, as a client's pooled
    // one would be: a server accepts new connections slowly while hundreds arrive.
    const probeAgent = new http.Agent({ keepAlive: true });
    expect((await getJson(`${base}/v1/keys/key-000001`, probeAgent)).status).toBe(200);
    const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
    const stop = new AbortController();
    // The 300 readers' requests all listen to it.
    setMaxListeners(0, stop.signal);
    let polls = 0;
    let refused = 0;

    // Each reader follows next as a client would, then waits at the head.
    const reader = async (): Promise<void> => {
      let after = 0;
      while (!stop.signal.aborted) {
        const answer = await getJson(`${base}/v1/changes?after=${after}&prefix=nothing/&wait=30`, agent, stop.signal).catch(() => null);
        if (!answer) return;
        polls += 1;
        if (answer.status !== 200) {
          refused += 1;
          await sleep(200);
          continue;
        }
        after = answer.body.next;
      }
    };
    const readers = Array.from({ length: 300 }, reader);
    // A writer wakes every waiting poll a few times a second.
    const writer = (async () => {
      for (let i = 0; !stop.signal.aborted; i++) {
        await writeBatch(base, [{ key: `other/${i % 50}`, value: i }]);
        await sleep(100);
      }
    })();
    const probes: { ms: number; status: number }[] = [];
    // Probed until every reader has caught up and waits at the head.
    const until = Date.now() + 45_000;
    const waiting = (): number => t.app.services.watchers.inUse;

    while (waiting() < 300 && Date.now() < until) {
      const started = performance.now();
      const { status } = await getJson(`${base}/v1/keys/key-000001`, probeAgent);
      probes.push({ ms: performance.now() - started, status });
      await sleep(20);
    }
    const waitedAtHead = waiting();
    stop.abort();
    await Promise.all([...readers, writer]);
    agent.destroy();
    probeAgent.destroy();

    const slowest = Math.max(...probes.map((p) => p.ms));
    expect(probes.filter((p) => p.status !== 200)).toEqual([]);
    // A generous bound: the failure was a 10 s wait and then 503.
    expect(slowest).toBeLessThan(3000);
    expect(refused).toBe(0);
    expect(waitedAtHead).toBe(300);
    // Every bounded page below the head answered at once (the last one waits).
    expect(polls).toBeGreaterThanOrEqual(300 * (Math.ceil(LOG_RECORDS / FEED_SCAN_RECORDS) - 1));
  }, 60_000);
});

describe('long polls and streams', () => {
  let t: TestApp;
  let base: string;
  beforeAll(async () => {
    t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_MAX_WATCHERS: '2' });
    base = baseUrl(t.app);
  });
  afterAll(async () => {
    await t.close();
  });

  it('a waiting long poll reads only the records committed since its last read, never from after again', async () => {
    await writeBatch(base, [{ key: 'w/0', value: 0 }]);
    const start = t.app.services.store.position().head;
    // The real store, its reads recorded.
    const store = t.app.services.store;
    const reads: number[] = [];
    const readChanges = store.readChanges.bind(store);
    store.readChanges = (query) => {
      reads.push(query.after);
      return readChanges(query);
    };
    try {
      const poll = getJson(`${base}/v1/changes?after=${start}&prefix=w/&wait=10`);
      await sleep(100);
      for (let i = 0; i < 3; i++) {
        await writeBatch(base, [{ key: `x/${i}`, value: i }]);
        await sleep(50);
      }
      await writeBatch(base, [{ key: 'w/1', value: 1 }]);
      const { body } = await poll;
      expect(body.records.map((r) => r.key)).toEqual(['w/1']);
      // The first read found nothing at the head; each read after a commit starts where
      // the one before stopped.
      expect(reads).toEqual([start, start, start + 1, start + 2, start + 3]);
    } finally {
      store.readChanges = readChanges;
    }
  });

  it('refuses more long polls and streams than STATELOG_MAX_WATCHERS with 429 and Retry-After', async () => {
    const { head } = t.app.services.store.position();
    const stop = new AbortController();
    const first = getJson(`${base}/v1/changes?after=${head}&wait=10`, undefined, stop.signal).catch(() => null);
    const stream = await SseClient.connect(`${base}/v1/changes/stream?after=${head}`);
    await sleep(150);
    const refusedPoll = await getJson(`${base}/v1/changes?after=${head}&wait=10`);
    expect(refusedPoll.status).toBe(429);
    expect(refusedPoll.headers['retry-after']).toBe('1');
    expect(refusedPoll.body.error?.code).toBe('too_many_requests');
    const refusedStream = await SseClient.open(`${base}/v1/changes/stream?after=${head}`);
    expect(refusedStream).toMatchObject({ status: 429, headers: { 'retry-after': '1' } });
    // A poll that need not wait takes no slot.
    expect((await getJson(`${base}/v1/changes?after=0&wait=10`)).status).toBe(200);
    // The slots come back when their clients go.
    stop.abort();
    stream.request.destroy();
    await first;
    await sleep(150);
    const again = await SseClient.connect(`${base}/v1/changes/stream?after=${head}`);
    again.request.destroy();
  });
});

describe('key=', () => {
  let t: TestApp;
  let base: string;
  beforeAll(async () => {
    t = await startApp({ STATELOG_SYNC: 'normal' });
    base = baseUrl(t.app);
    // offsets 1..6; "k" and keys that start with it
    await writeBatch(base, ['k', 'k2', 'k/a', 'j', 'k', 'kk'].map((key, i) => ({ key, value: i + 1 })));
  });
  afterAll(async () => {
    await t.close();
  });

  it('GET /v1/changes gives only the exact key\'s records, next at the head', async () => {
    const { status, body } = await getJson(`${base}/v1/changes?key=k`);
    expect(status).toBe(200);
    expect(body.records.map((r) => [r.offset, r.key])).toEqual([
      [1, 'k'],
      [5, 'k'],
    ]);
    expect(body.next).toBe(6);
    const other = await getJson(`${base}/v1/changes?key=${encodeURIComponent('k/a')}`);
    expect(other.body.records.map((r) => r.offset)).toEqual([3]);
  });

  it('a long poll on a key wakes for that key only', async () => {
    const poll = getJson(`${base}/v1/changes?after=6&key=k&wait=10`);
    await sleep(100);
    await writeBatch(base, [{ key: 'k2', value: 0 }]);
    await sleep(100);
    await writeBatch(base, [{ key: 'k', value: 'new' }]);
    const { body } = await poll;
    expect(body.records.map((r) => [r.offset, r.key, r.value])).toEqual([[8, 'k', 'new']]);
  });

  it('the stream gives only the key\'s records, from a snapshot of the key alone', async () => {
    const stream = await SseClient.connect(`${base}/v1/changes/stream?key=k&snapshot=true`);
    await stream.until((events) => events.some((e) => e.event === 'snapshot-end'));
    expect(stream.records().map((r) => [r.key, r.value])).toEqual([['k', 'new']]);
    await writeBatch(base, [{ key: 'kk', value: 1 }, { key: 'k', value: 2 }]);
    await stream.until((events) => events.filter((e) => e.event === 'record').length === 2);
    expect(stream.records().map((r) => [r.key, r.value])).toEqual([
      ['k', 'new'],
      ['k', 2],
    ]);
    stream.request.destroy();
  });

  it('refuses key with prefix, and a key that breaks the key rules', async () => {
    const both = await getJson(`${base}/v1/changes?key=k&prefix=k`);
    expect(both.status).toBe(400);
    expect(both.body.error?.code).toBe('invalid_request');
    const empty = await getJson(`${base}/v1/changes?key=`);
    expect(empty.status).toBe(400);
    const stream = await SseClient.open(`${base}/v1/changes/stream?key=k&prefix=k`);
    expect(stream).toMatchObject({ status: 400 });
  });
});
