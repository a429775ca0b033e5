// POST /v1/records with batches of 100 sets, 50 connections, STATELOG_SYNC=full:
// records committed per second (target >= 150,000).
//   npm run bench -- --only batch
import type { HttpRequest } from '../shared/closed-loop.js';
import type { Figure } from '../shared/figure.js';
import { startStatelog } from '../shared/lib.js';
import { load } from '../shared/load.js';
import { PUT_KEYS, randomKey, randomValue } from './write.js';

const BATCH = 100;
/** Bodies made before the load (bench/shared/load.ts sends pre-built requests). */
const BODIES = 256;

/** Pre-built POST /v1/records requests of `size` sets each, to random keys of PUT_KEYS. */
export function batchRequests(size = BATCH): HttpRequest[] {
  return Array.from({ length: BODIES }, () => {
    const records = Array.from({ length: size }, () => `{"key":"${randomKey()}","value":${randomValue()}}`);
    return { method: 'POST', path: '/v1/records', body: `{"records":[${records.join(',')}]}` };
  });
}

export const batchFigure: Figure = {
  name: 'batch',
  title: `POST /v1/records, batches of ${BATCH}, c = 50`,
  async run(settings) {
    const connections = 50;
    const requests = batchRequests();
    const server = await startStatelog();
    const runs = [];
    try {
      await load({ url: server.url, connections, seconds: settings.warmupSeconds, requests });
      for (let round = 0; round < settings.rounds; round++) {
        const result = await load({ url: server.url, connections, seconds: settings.seconds, requests });
        settings.log(`round ${round + 1}: ${(result.rps * BATCH).toFixed(0)} records/s (${result.rps.toFixed(0)} batches/s), p99 ${result.p99.toFixed(1)} ms`);
        runs.push(result);
      }
    } finally {
      await server.stop();
    }
    return {
      scale: `${connections} connections, ${BATCH} sets of random keys of ${PUT_KEYS.toLocaleString()} a batch, ${settings.seconds} s a round, STATELOG_SYNC=full`,
      settings: { connections, batch: BATCH, seconds: settings.seconds, rounds: settings.rounds, sync: 'full', failedRequests: runs.reduce((n, r) => n + r.errors, 0) },
      metrics: [
        { label: 'records committed', unit: 'records/s', values: runs.map((r) => r.rps * BATCH), target: { op: '>=', value: 150_000 } },
        { label: 'batches', unit: 'req/s', values: runs.map((r) => r.rps) },
        { label: 'batch p50', unit: 'ms', values: runs.map((r) => r.p50) },
        { label: 'batch p99', unit: 'ms', values: runs.map((r) => r.p99) },
      ],
      details: runs,
    };
  },
};
