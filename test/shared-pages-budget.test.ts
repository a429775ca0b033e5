// The pages kept at the head for sharing are bounded in bytes (STATELOG_SHARED_PAGES_MAX_BYTES):
// one client walking through pages of 1 MB values at an idle head cannot grow the heap past
// the bound, evictions are counted, and the pages other readers share are never the ones it evicts.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl } from './support/stream-clients.js';

const BUDGET = 16 * 1024 * 1024;
const RECORDS = 30;
const VALUE = JSON.stringify('x'.repeat(1_000_000));

/** The sum of a metric's series with these labels; absent, an error (absent with `orZero`, 0). */
async function metric(base: string, name: string, labels = '', orZero = false): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}${labels} `));
  if (line === undefined && orZero) return 0;
  if (line === undefined) throw new Error(`no ${name}${labels} in /metrics`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

const feedReads = async (base: string) =>
  (await metric(base, 'statelog_feed_reads_total', '{from="window"}', true)) + (await metric(base, 'statelog_feed_reads_total', '{from="store"}', true));

describe('the shared pages budget', () => {
  let t: TestApp;
  let base: string;
  beforeAll(async () => {
    t = await startApp({ STATELOG_SYNC: 'normal', STATELOG_SHARED_PAGES_MAX_BYTES: String(BUDGET) });
    base = baseUrl(t.app);
    for (let i = 0; i < RECORDS; i++) {
      const res = await fetch(`${base}/v1/keys/big-${i}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: `{"value":${VALUE}}` });
      expect(res.status).toBe(200);
    }
  });
  afterAll(() => t.close());

  const page = async (after: number, limit: number) => {
    const res = await fetch(`${base}/v1/changes?after=${after}&limit=${limit}`);
    expect(res.status).toBe(200);
    return (await res.json()) as { records: unknown[] };
  };

  it('keeps at most the budget while one client reads page after page, and counts what it evicts', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // Two readers share the first page: the walk below must not evict it.
    await Promise.all([page(0, 1), page(0, 1)]);
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    for (let after = 1; after < RECORDS - 1; after++) expect((await page(after, 2)).records).toHaveLength(2);
    gc();
    const heapGrowth = process.memoryUsage().heapUsed - heapBefore;
    console.log(`heap growth over the walk: ${(heapGrowth / 1024 / 1024).toFixed(1)} MiB`);

    const kept = await metric(base, 'statelog_shared_pages_bytes');
    const evicted = await metric(base, 'statelog_shared_pages_evicted_total');
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThanOrEqual(BUDGET);
    expect(evicted).toBeGreaterThan(0);
    // Each page of two 1 MB values and its rendering is some 4 MB: kept whole, 28 of them would be 112 MB.
    expect(heapGrowth).toBeLessThan(BUDGET + 8 * 1024 * 1024);
    console.log(`kept ${(kept / 1024 / 1024).toFixed(1)} MiB, ${evicted} evictions`);

    // The shared page is still kept: asking it again reads nothing.
    const reads = await feedReads(base);
    expect(reads).toBeGreaterThan(0);
    await page(0, 1);
    expect(await feedReads(base)).toBe(reads);
  });
});
