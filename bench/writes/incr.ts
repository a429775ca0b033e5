// Contended increments: 50 connections increment 10 hot keys through POST /v1/records
// (op "incr", one item a request), STATELOG_SYNC=full. Every acknowledged increment is
// counted by the client; at the end each key must hold exactly the sum of its
// acknowledged increments, and no two answers for one key may carry the same result.
//   npm run bench -- --only incr
import { closedLoop, HttpClient, type LoopResult } from '../shared/closed-loop.js';
import type { Figure } from '../shared/figure.js';
import { startStatelog } from '../shared/lib.js';

const HOT_KEYS = 10;

interface Tally {
  /** Per key: the sum of the acknowledged increments. */
  acknowledged: number[];
  /** Per key: every result value an answer carried. */
  results: Set<number>[];
  /** Increments sent but not acknowledged (an error): applied or not, nobody knows. */
  unknown: number[];
}

async function increment(client: HttpClient, tally: Tally): Promise<void> {
  const k = Math.floor(Math.random() * HOT_KEYS);
  const by = 1 + Math.floor(Math.random() * 9);
  try {
    const text = await client.expectOk({ method: 'POST', path: '/v1/records', body: `{"records":[{"key":"hot_${k}","op":"incr","by":${by}}]}` });
    const value = (JSON.parse(text) as { records: { value: number }[] }).records[0]!.value;
    tally.acknowledged[k]! += by;
    tally.results[k]!.add(value);
  } catch (err) {
    tally.unknown[k]! += by;
    throw err;
  }
}

/** Counts lost updates: acknowledged increments missing from the final values. */
async function check(client: HttpClient, tally: Tally, acknowledgedCount: number) {
  let lost = 0;
  const finals: number[] = [];
  for (let k = 0; k < HOT_KEYS; k++) {
    // A key that no increment reached has no value yet: 0.
    const { status, text } = await client.send({ method: 'GET', path: `/v1/keys/hot_${k}` });
    if (status !== 200 && status !== 404) throw new Error(`GET /v1/keys/hot_${k}: status ${status} ${text.slice(0, 200)}`);
    const value = status === 404 ? 0 : (JSON.parse(text) as { value: number }).value;
    finals.push(value);
    // With no failed request the final value must equal the acknowledged sum exactly;
    // a failed one may or may not have been applied.
    if (value < tally.acknowledged[k]!) lost += tally.acknowledged[k]! - value;
    if (value > tally.acknowledged[k]! + tally.unknown[k]!) lost += value - tally.acknowledged[k]! - tally.unknown[k]!;
  }
  const distinctResults = tally.results.reduce((n, set) => n + set.size, 0);
  // Two acknowledged increments that answered the same result: one overwrote the other.
  const duplicateResults = acknowledgedCount - distinctResults;
  return { lost, duplicateResults, finals, acknowledgedSums: tally.acknowledged };
}

export const incrFigure: Figure = {
  name: 'incr',
  title: `Contended incr on ${HOT_KEYS} hot keys, c = 50`,
  async run(settings) {
    const connections = 50;
    const server = await startStatelog();
    const client = new HttpClient(server.url, connections);
    const tally: Tally = {
      acknowledged: new Array<number>(HOT_KEYS).fill(0),
      results: Array.from({ length: HOT_KEYS }, () => new Set<number>()),
      unknown: new Array<number>(HOT_KEYS).fill(0),
    };
    const runs: LoopResult[] = [];
    let verdict;
    try {
      const load = (seconds: number) => closedLoop(connections, seconds, () => increment(client, tally));
      const warmup = await load(settings.warmupSeconds);
      for (let round = 0; round < settings.rounds; round++) {
        const result = await load(settings.seconds);
        settings.log(`round ${round + 1}: ${result.rps.toFixed(0)} incr/s, p99 ${result.p99.toFixed(1)} ms`);
        runs.push(result);
      }
      const acknowledgedCount = warmup.requests + runs.reduce((n, r) => n + r.requests, 0);
      verdict = { acknowledged: acknowledgedCount, ...(await check(client, tally, acknowledgedCount)) };
      settings.log(`${acknowledgedCount} acknowledged increments: ${verdict.lost} lost, ${verdict.duplicateResults} duplicate results`);
    } finally {
      await client.close();
      await server.stop();
    }
    return {
      scale: `${connections} connections on ${HOT_KEYS} keys, 1 incr (by 1..9) a request, ${settings.seconds} s a round, STATELOG_SYNC=full; sums checked once after all rounds`,
      settings: { connections, hotKeys: HOT_KEYS, seconds: settings.seconds, rounds: settings.rounds, sync: 'full', failedRequests: runs.reduce((n, r) => n + r.errors, 0) },
      metrics: [
        { label: 'incr', unit: 'req/s', values: runs.map((r) => r.rps) },
        { label: 'incr p50', unit: 'ms', values: runs.map((r) => r.p50) },
        { label: 'incr p99', unit: 'ms', values: runs.map((r) => r.p99) },
        { label: 'acknowledged increments checked', unit: 'incr', values: [verdict.acknowledged] },
        { label: 'lost updates (final sums vs acknowledged)', unit: 'incr', values: [verdict.lost], target: { op: '<=', value: 0 }, digits: 0 },
        { label: 'duplicate results (two answers with one value)', unit: 'answers', values: [verdict.duplicateResults], target: { op: '<=', value: 0 }, digits: 0 },
      ],
      details: { runs, check: verdict },
    };
  },
};
