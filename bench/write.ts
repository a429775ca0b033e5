// Durable PUT throughput and latency against a bare fastify route that only parses and
// validates the same body, measured alternately in one run (the machine is noisy).
//   npm run bench:write [-- --connections 50 --seconds 5 --rounds 3]
import { durablePuts, flag, median, PUT_KEYS, saveResult, startNode, startStatelog, summary, type LoadResult } from './lib.js';

const connections = flag('connections', 50);
const seconds = flag('seconds', 5);
const rounds = flag('rounds', 3);
const putLoad = (url: string) => durablePuts(url, connections, seconds);

const statelog = await startStatelog({ STATELOG_SYNC: 'full' });
const bare = await startNode('bench/bare-server.ts', {});
const runs: { statelog: LoadResult; bare: LoadResult }[] = [];
try {
  await putLoad(statelog.url); // warm-up: JIT, page cache, first pages of the file
  await putLoad(bare.url);
  for (let round = 0; round < rounds; round++) {
    // Alternate which side goes first so drift in the machine's load hits both.
    const first = round % 2 === 0 ? 'statelog' : 'bare';
    const a = await putLoad(first === 'statelog' ? statelog.url : bare.url);
    const b = await putLoad(first === 'statelog' ? bare.url : statelog.url);
    runs.push(first === 'statelog' ? { statelog: a, bare: b } : { statelog: b, bare: a });
    console.log(`round ${round + 1}: statelog ${a.rps.toFixed(0)} req/s, bare ${b.rps.toFixed(0)} req/s`);
  }
} finally {
  await statelog.stop();
  await bare.stop();
}

const rpsRatios = runs.map((r) => r.statelog.rps / r.bare.rps);
const p99Ratios = runs.map((r) => r.statelog.p99 / Math.max(r.bare.p99, 1));
const result = {
  settings: { connections, seconds, rounds, keys: PUT_KEYS, sync: 'full' },
  statelog: {
    rps: summary(runs.map((r) => r.statelog.rps)),
    p50: summary(runs.map((r) => r.statelog.p50)),
    p99: summary(runs.map((r) => r.statelog.p99)),
    non2xx: runs.reduce((n, r) => n + r.statelog.non2xx + r.statelog.errors, 0),
  },
  bare: {
    rps: summary(runs.map((r) => r.bare.rps)),
    p50: summary(runs.map((r) => r.bare.p50)),
    p99: summary(runs.map((r) => r.bare.p99)),
  },
  ratio: { rps: summary(rpsRatios), p99: summary(p99Ratios) },
  targets: { rpsRatio: '>= 0.60', p99Ratio: '<= 2' },
};
const file = saveResult(`write-c${connections}`, result);
console.log(
  `durable PUT c=${connections}: statelog ${median(runs.map((r) => r.statelog.rps)).toFixed(0)} req/s ` +
    `(p50 ${median(runs.map((r) => r.statelog.p50))} ms, p99 ${median(runs.map((r) => r.statelog.p99))} ms); ` +
    `bare ${median(runs.map((r) => r.bare.rps)).toFixed(0)} req/s (p50 ${median(runs.map((r) => r.bare.p50))} ms, ` +
    `p99 ${median(runs.map((r) => r.bare.p99))} ms); ratio ${median(rpsRatios).toFixed(2)}, p99 ratio ${median(p99Ratios).toFixed(2)}`,
);
console.log(`written to ${file}`);
