// What bounds cost an increment: batches of 100 incr items to random keys, unguarded, with a
// floor ("min": 0, a balance that never goes below zero) and with both bounds ("min" and a
// 13-digit "max"), through POST /v1/records at 50 connections, STATELOG_SYNC=full, the sides
// alternating on one server. The bounds always hold, so every side writes the same.
// Target: the floor >= 0.95 × unguarded records/s; both bounds are shown beside it (their
// items are 70 % longer, which parsing and the socket pay). The server's CPU time a record is
// shown too: on a shared machine records/s swing by a third from round to round, while the
// CPU a record moves only with what the server does for it.
//   npm run bench -- --only guarded-incr
import type { HttpRequest } from '../shared/closed-loop.js';
import { processSeconds } from '../shared/cpu-share.js';
import { alternate, ratios, type Figure } from '../shared/figure.js';
import { startStatelog } from '../shared/lib.js';
import { load } from '../shared/load.js';
import { PUT_KEYS, randomKey } from './write.js';

const BATCH = 100;
const BODIES = 256;
const BOUNDS = { unguarded: '', floor: ',"min":0', both: ',"min":0,"max":1000000000000' } as const;
type Side = keyof typeof BOUNDS;
const SIDES = Object.keys(BOUNDS) as Side[];

/** Pre-built batches; the guarded sides' items carry bounds that the sums never leave. */
function incrRequests(side: Side): HttpRequest[] {
  return Array.from({ length: BODIES }, () => {
    const records = Array.from({ length: BATCH }, () => `{"key":"${randomKey()}","op":"incr","by":${1 + Math.floor(Math.random() * 9)}${BOUNDS[side]}}`);
    return { method: 'POST', path: '/v1/records', body: `{"records":[${records.join(',')}]}` };
  });
}

export const guardedIncrFigure: Figure = {
  name: 'guarded-incr',
  title: `Guarded vs unguarded incr batches of ${BATCH}, c = 50`,
  async run(settings) {
    const connections = 50;
    const requests = Object.fromEntries(SIDES.map((side) => [side, incrRequests(side)])) as Record<Side, HttpRequest[]>;
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
    const records = (side: Side) => runs[side].map((r) => r.rps * BATCH);
    const cpu = (side: Side) => runs[side].map((r) => r.cpuUs);
    return {
      scale: `${connections} connections, ${BATCH} increments of random keys of ${PUT_KEYS.toLocaleString()} a batch, ${settings.seconds} s a side a round, STATELOG_SYNC=full`,
      settings: { connections, batch: BATCH, seconds: settings.seconds, rounds: settings.rounds, sync: 'full' },
      metrics: [
        { label: 'unguarded incr', unit: 'records/s', values: records('unguarded') },
        { label: 'guarded incr (min 0)', unit: 'records/s', values: records('floor') },
        { label: 'guarded incr (min, max)', unit: 'records/s', values: records('both') },
        { label: 'guarded (min 0) / unguarded', unit: '×', values: ratios(records('floor'), records('unguarded')), target: { op: '>=', value: 0.95 } },
        { label: 'guarded (min, max) / unguarded', unit: '×', values: ratios(records('both'), records('unguarded')) },
        { label: 'unguarded server CPU a record', unit: 'µs', values: cpu('unguarded') },
        { label: 'guarded (min 0) server CPU a record', unit: 'µs', values: cpu('floor') },
        { label: 'guarded (min, max) server CPU a record', unit: 'µs', values: cpu('both') },
        { label: 'guarded (min 0) / unguarded CPU a record', unit: '×', values: ratios(cpu('floor'), cpu('unguarded')) },
        { label: 'guarded (min, max) / unguarded CPU a record', unit: '×', values: ratios(cpu('both'), cpu('unguarded')) },
        { label: 'unguarded p99', unit: 'ms', values: runs.unguarded.map((r) => r.p99) },
        { label: 'guarded (min 0) p99', unit: 'ms', values: runs.floor.map((r) => r.p99) },
        { label: 'guarded (min, max) p99', unit: 'ms', values: runs.both.map((r) => r.p99) },
      ],
      details: runs,
    };
  },
};
