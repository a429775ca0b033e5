// A listing over expired keys the expirer has not reached: 100k keys (2k with --smoke)
// past their TTL, the expirer off (STATELOG_EXPIRY_INTERVAL_MS=0), and no live key under
// their prefix. The time of that prefix's first page (empty: a page examines at most
// LIST_SCAN_SLACK rows beyond its limit, then answers with a cursor) and of the whole
// listing, every cursor followed. STATELOG_SYNC=full.
//   npm run bench -- --only expired-listing
import type { Figure } from '../shared/figure.js';
import { httpJson, median, percentile, startStatelog } from '../shared/lib.js';

const BATCH = 1000;
const PAGE = 100;
const SAMPLES = 50;

async function fill(url: string, count: number): Promise<void> {
  for (let i = 0; i < count; i += BATCH) {
    const records = Array.from({ length: Math.min(BATCH, count - i) }, (_, j) => ({ key: `exp/${String(i + j).padStart(7, '0')}`, value: { i: i + j }, ttlMs: 1 }));
    const res = await httpJson('POST', `${url}/v1/records`, { records });
    if (res.status !== 200) throw new Error(`fill: status ${res.status}`);
  }
  // One live key on each side of the prefix, as a real key space has.
  await httpJson('POST', `${url}/v1/records`, { records: [{ key: 'exo', value: 1 }, { key: 'exq', value: 1 }] });
}

type Page = { items: unknown[]; cursor: string | null };

const page = async (url: string, cursor: string | null): Promise<Page> => {
  const query = `prefix=exp%2F&limit=${PAGE}${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`;
  return (await httpJson('GET', `${url}/v1/keys?${query}`)).body as Page;
};

export const expiredListingFigure: Figure = {
  name: 'expired-listing',
  title: 'A listing page over 100k expired keys the expirer has not reached',
  async run(settings) {
    const keys = settings.smoke ? 2_000 : 100_000;
    const server = await startStatelog({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const first: number[] = [];
    const whole: number[] = [];
    let pages = 0;
    try {
      await fill(server.url, keys);
      for (let i = 0; i < 5; i++) await page(server.url, null);
      for (let i = 0; i < SAMPLES; i++) {
        const start = performance.now();
        const answer = await page(server.url, null);
        first.push(performance.now() - start);
        if (answer.items.length > 0) throw new Error('an expired key was listed');
      }
      for (let round = 0; round < settings.rounds; round++) {
        const start = performance.now();
        let cursor: string | null = null;
        pages = 0;
        do {
          const answer: Page = await page(server.url, cursor);
          if (answer.items.length > 0) throw new Error('an expired key was listed');
          cursor = answer.cursor;
          pages += 1;
        } while (cursor !== null);
        whole.push(performance.now() - start);
      }
      settings.log(`first page ${median(first).toFixed(2)} ms (p99 ${percentile(first, 99).toFixed(2)}); the whole listing ${median(whole).toFixed(1)} ms in ${pages} pages`);
    } finally {
      await server.stop();
    }
    return {
      scale: `${keys.toLocaleString()} expired keys under the prefix, the expirer off, pages of ${PAGE}, STATELOG_SYNC=full`,
      settings: { keys, limit: PAGE, samples: SAMPLES, rounds: settings.rounds, pages },
      metrics: [
        { label: 'empty first page, round trip', unit: 'ms', values: [median(first)] },
        { label: 'empty first page, round trip p99', unit: 'ms', values: [percentile(first, 99)] },
        { label: 'the whole listing, every cursor followed', unit: 'ms', values: whole },
      ],
    };
  },
};
