// The expirer's pace: batched ingest of keys with `ttlMs: 1000` at the write path's
// limit (a closed loop of batches of 100 new keys on 16 connections) for 60 s (2 s with
// --smoke), while /v1/stats is sampled every 500 ms. The backlog is `expiredKeys`: keys
// past their expiry whose tombstone is not written yet. Target: it stays under one
// second of ingest. STATELOG_SYNC=full.
//   npm run bench -- --only expiry-pace
import { httpLoad, type LoopResult } from '../shared/closed-loop.js';
import type { Figure } from '../shared/figure.js';
import { httpJson, sleep, startStatelog } from '../shared/lib.js';

const CONNECTIONS = 16;
const BATCH = 100;
const TTL_MS = 1000;
const SAMPLE_MS = 500;

interface Sample {
  at: number;
  head: number;
  expiredKeys: number;
}

const stats = async (url: string): Promise<Sample> => {
  const body = (await httpJson('GET', `${url}/v1/stats`)).body as { head: number; expiredKeys: number };
  return { at: Date.now(), head: body.head, expiredKeys: body.expiredKeys };
};

export const expiryPaceFigure: Figure = {
  name: 'expiry-pace',
  title: 'Expiry backlog under batched TTL ingest at the write path\'s limit',
  async run(settings) {
    const seconds = settings.smoke ? 2 : 60;
    const server = await startStatelog();
    const ingest: number[] = [];
    const appended: number[] = [];
    const backlogKeys: number[] = [];
    const backlogSeconds: number[] = [];
    const loads: LoopResult[] = [];
    const batch = (w: number, i: number) => {
      const records = Array.from({ length: BATCH }, (_, j) => `{"key":"ttl/${w}/${i}/${j}","value":${j},"ttlMs":${TTL_MS}}`);
      return { method: 'POST' as const, path: '/v1/records', body: `{"records":[${records.join(',')}]}` };
    };
    try {
      for (let round = 0; round < settings.rounds; round++) {
        const samples: Sample[] = [];
        let loading = true;
        const sampling = (async () => {
          while (loading) {
            samples.push(await stats(server.url));
            await sleep(SAMPLE_MS);
          }
        })();
        const start = await stats(server.url);
        const load = await httpLoad(server.url, CONNECTIONS, seconds, (w, i) => batch(w, i + round * 1_000_000));
        loading = false;
        await sampling;
        const end = await stats(server.url);
        // The load's own records: the head also moves with the expirer's tombstones.
        const rate = (load.requests * BATCH) / seconds;
        appended.push((end.head - start.head) / ((end.at - start.at) / 1000));
        // Samples from the first expiry on: before it nothing can be due.
        const due = samples.filter((s) => s.at >= start.at + TTL_MS);
        const worst = Math.max(0, ...due.map((s) => s.expiredKeys));
        loads.push(load);
        ingest.push(rate);
        backlogKeys.push(worst);
        backlogSeconds.push(rate > 0 ? worst / rate : 0);
        settings.log(
          `round ${round + 1}: ingest ${Math.round(rate)} records/s for ${seconds} s, largest backlog ${worst} keys (${(worst / rate).toFixed(2)} s of ingest)`,
        );
        // The keys of this round expire and go before the next one starts.
        await sleep(TTL_MS);
        for (let wait = 0; wait < 600 && (await stats(server.url)).expiredKeys > 0; wait++) await sleep(100);
      }
    } finally {
      await server.stop();
    }
    return {
      scale: `batches of ${BATCH} new keys with ttlMs ${TTL_MS}, ${CONNECTIONS} connections, ${seconds} s a round, STATELOG_SYNC=full`,
      settings: { connections: CONNECTIONS, batch: BATCH, ttlMs: TTL_MS, seconds, rounds: settings.rounds, sync: 'full' },
      metrics: [
        { label: 'TTL ingest', unit: 'records/s', values: ingest },
        { label: 'records appended (ingest and tombstones)', unit: 'records/s', values: appended },
        { label: 'largest expiry backlog', unit: 'keys', values: backlogKeys },
        { label: 'largest backlog in seconds of ingest', unit: 's', values: backlogSeconds, target: { op: '<=', value: 1 } },
      ],
      details: { loads },
    };
  },
};
