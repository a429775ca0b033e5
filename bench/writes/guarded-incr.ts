// What bounds cost an increment: batches of 100 incr items to random keys, with and without
// "min"/"max" (bounds that always hold, so both sides write the same), through POST
// /v1/records at 50 connections, STATELOG_SYNC=full, the sides alternating on one server.
// Target: guarded >= 0.95 × unguarded records/s. The server's CPU time a record is shown
// beside it: on a shared machine records/s swing by a third from round to round, while
// the CPU a record moves only with what the server does for it.
//   npm run bench -- --only guarded-incr
import type { HttpRequest } from '../shared/closed-loop.js';
import { processSeconds } from '../shared/cpu-share.js';
import { alternate, ratios, type Figure } from '../shared/figure.js';
import { startStatelog } from '../shared/lib.js';
import { load } from '../shared/load.js';
import { PUT_KEYS, randomKey } from './write.js';

const BATCH = 100;
const BODIES = 256;
const SIDES = ['unguarded', 'guarded'] as const;

/** Pre-built batches; the guarded side's items carry bounds that the sums never leave. */
function incrRequests(guarded: boolean): HttpRequest[] {
  const bounds = guarded ? ',"min":0,"max":1000000000000' : '';
  return Array.from({ length: BODIES }, () => {
    const records = Array.from({ length: BATCH }, () => `{"key":"${randomKey()}","op":"incr","by":${1 + Math.floor(Math.random() * 9)}${bounds}}`);
    return { method: 'POST', path: '/v1/records', body: `{"records":[${records.join(',')}]}` };
  });
}

export const guardedIncrFigure: Figure = {
  name: 'guarded-incr',
  title: `Guarded vs unguarded incr batches of ${BATCH}, c = 50`,
  async run(settings) {
    const connections = 50;
    const requests = { unguarded: incrRequests(false), guarded: incrRequests(true) };
    const server = await startStatelog();
    let runs;
    try {
      for (const side of SIDES) await load({ url: server.url, connections, seconds: settings.warmupSeconds, requests: requests[side] });
      const pid = server.proc.pid!;
      runs = await alternate(settings.rounds, SIDES, async (side, round) => {
        const before = processSeconds(pid);
        const result = await load({ url: server.url, connections, seconds: settings.seconds, requests: requests[side] });
        if (result.errors > 0) throw new Error(`${side}: ${result.errors} failed requests`);
        const cpuUs = ((processSeconds(pid) - before) * 1e6) / (result.requests * BATCH);
        settings.log(`round ${round + 1} ${side}: ${(result.rps * BATCH).toFixed(0)} records/s, p99 ${result.p99.toFixed(1)} ms, ${cpuUs.toFixed(2)} µs CPU a record`);
        return { ...result, cpuUs };
      });
    } finally {
      await server.stop();
    }
    const records = (side: (typeof SIDES)[number]) => runs[side].map((r) => r.rps * BATCH);
    return {
      scale: `${connections} connections, ${BATCH} increments of random keys of ${PUT_KEYS.toLocaleString()} a batch, ${settings.seconds} s a side a round, STATELOG_SYNC=full`,
      settings: { connections, batch: BATCH, seconds: settings.seconds, rounds: settings.rounds, sync: 'full' },
      metrics: [
        { label: 'unguarded incr', unit: 'records/s', values: records('unguarded') },
        { label: 'guarded incr (min, max)', unit: 'records/s', values: records('guarded') },
        { label: 'guarded / unguarded', unit: '×', values: ratios(records('guarded'), records('unguarded')), target: { op: '>=', value: 0.95 } },
        { label: 'unguarded server CPU a record', unit: 'µs', values: runs.unguarded.map((r) => r.cpuUs) },
        { label: 'guarded server CPU a record', unit: 'µs', values: runs.guarded.map((r) => r.cpuUs) },
        { label: 'guarded / unguarded CPU a record', unit: '×', values: ratios(runs.guarded.map((r) => r.cpuUs), runs.unguarded.map((r) => r.cpuUs)) },
        { label: 'unguarded p99', unit: 'ms', values: runs.unguarded.map((r) => r.p99) },
        { label: 'guarded p99', unit: 'ms', values: runs.guarded.map((r) => r.p99) },
      ],
      details: runs,
    };
  },
};
