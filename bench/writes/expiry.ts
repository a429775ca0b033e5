// A mass expiry: 100k keys (2k with --smoke) whose TTL ends in the same second, while
// 10 connections PUT other keys. The p99 of those PUTs while the expirer deletes the
// keys, against the p99 of the same load just before the expiry (target: at most
// 1.5x), and how long the last tombstone takes after the expiry. STATELOG_SYNC=full.
//   npm run bench -- --only expiry
// Both sides run on the same database (the keys already written), the same heap and
// warm connections, one right after the other, so that they differ by the expiry
// alone: an idle side measured before the fill, and a loaded side after half a minute
// without requests, differed by those too (1.5x and 1.6x with nothing expiring). The
// drain is read afterwards from the tombstones' commit times in the change feed:
// /v1/stats counts the backlog by the expiry index, about 3 ms of the server's
// event loop a call at 100k keys, so polling it every 50 ms during the load weighed on
// what it measured.
import { httpLoad, type LoopResult } from '../shared/closed-loop.js';
import type { Figure } from '../shared/figure.js';
import { httpJson, sleep, startStatelog } from '../shared/lib.js';

const CONNECTIONS = 10;
const BATCH = 1000;

const stats = async (url: string) => (await httpJson('GET', `${url}/v1/stats`)).body as { head: number; expiredKeys: number };

/** The latest commit time (ms) of a delete of a key under `prefix` after offset `after`, read from the change feed. */
async function lastTombstone(url: string, after: number, prefix: string): Promise<number> {
  let last = 0;
  for (;;) {
    const page = (await httpJson('GET', `${url}/v1/changes?after=${after}&limit=10000`)).body as {
      records: { key: string; op: string; ts: number }[];
      next: number;
      head: number;
    };
    for (const record of page.records) if (record.op === 'delete' && record.key.startsWith(prefix)) last = Math.max(last, record.ts);
    if (page.next >= page.head) return last;
    after = page.next;
  }
}

/** Writes `count` keys in batches, each with the TTL that ends at `expiresAt`. */
async function fill(url: string, round: number, count: number, expiresAt: number): Promise<void> {
  for (let i = 0; i < count; i += BATCH) {
    const ttlMs = expiresAt - Date.now();
    if (ttlMs < 1) throw new Error('the fill took longer than its budget');
    const records = Array.from({ length: Math.min(BATCH, count - i) }, (_, j) => ({ key: `exp/${round}/${i + j}`, value: { i: i + j }, ttlMs }));
    const res = await httpJson('POST', `${url}/v1/records`, { records });
    if (res.status !== 200) throw new Error(`fill: status ${res.status}`);
  }
}

export const expiryFigure: Figure = {
  name: 'expiry',
  title: 'PUT p99 while 100k keys expire in the same second',
  async run(settings) {
    const keys = settings.smoke ? 2_000 : 100_000;
    // Time to write the keys before they expire (a few seconds when the machine is quiet,
    // as benchmarks need it); every round waits this long for its expiry.
    const fillBudgetMs = settings.smoke ? 10_000 : 30_000;
    const server = await startStatelog();
    const idle: LoopResult[] = [];
    const expiring: LoopResult[] = [];
    const drainMs: number[] = [];
    const put = (w: number, i: number) => ({ method: 'PUT' as const, path: `/v1/keys/load-${w}-${i % 100}`, body: `{"value":${i}}` });
    try {
      await httpLoad(server.url, CONNECTIONS, settings.warmupSeconds, put);
      for (let round = 0; round < settings.rounds; round++) {
        const expiresAt = Date.now() + fillBudgetMs;
        await fill(server.url, round, keys, expiresAt);
        // The idle side ends half a second before the expiry; the loaded side starts at it.
        const idleAt = expiresAt - settings.seconds * 1000 - 500;
        if (idleAt < Date.now()) throw new Error('the fill took longer than its budget');
        await sleep(idleAt - Date.now());
        const before = (await stats(server.url)).head;
        idle.push(await httpLoad(server.url, CONNECTIONS, settings.seconds, put));
        // A request that stalled for half a second would put the expiry into the idle side.
        if (Date.now() >= expiresAt) throw new Error('the idle side ran into the expiry: the host is too busy for this figure');
        await sleep(expiresAt - Date.now());
        expiring.push(await httpLoad(server.url, CONNECTIONS, settings.seconds, put));
        // liveKeys leaves expired keys out at once; expiredKeys counts those without a tombstone.
        while ((await stats(server.url)).expiredKeys > 0) await sleep(50);
        drainMs.push((await lastTombstone(server.url, before, `exp/${round}/`)) - expiresAt);
        settings.log(
          `round ${round + 1}: PUT p99 idle ${idle[round]!.p99.toFixed(1)} ms, while ${keys} keys expire ${expiring[round]!.p99.toFixed(1)} ms; last tombstone ${drainMs[round]} ms after the expiry`,
        );
      }
    } finally {
      await server.stop();
    }
    return {
      scale: `${keys} keys expiring at once, ${CONNECTIONS} connections of PUTs, ${settings.seconds} s a side, STATELOG_SYNC=full`,
      settings: { keys, connections: CONNECTIONS, seconds: settings.seconds, rounds: settings.rounds, sync: 'full' },
      metrics: [
        { label: 'PUT p99 idle', unit: 'ms', values: idle.map((r) => r.p99) },
        { label: 'PUT p99 while keys expire', unit: 'ms', values: expiring.map((r) => r.p99) },
        { label: 'p99 while expiring / idle', unit: '×', values: expiring.map((r, i) => r.p99 / idle[i]!.p99), target: { op: '<=', value: 1.5 } },
        { label: 'last tombstone after the expiry', unit: 'ms', values: drainMs },
      ],
      details: { idle, expiring, drainMs },
    };
  },
};
