// Did a change make the server faster? The c = 50 PUT, GET or batch load on the working tree's
// build and on a build of an earlier commit, with the bare fastify route beside them,
// taking turns in each round (the first side rotating), and each server's CPU time per
// request from /proc. On this noisy machine only such same-run pairs tell a change of a
// few per cent from the drift.
//   npm run build && npx tsx bench/profiling/versus-commit.ts --base <commit> [--get | --batch] [--rounds 6 --seconds 3]
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { buildCommit } from '../shared/base-build.js';
import type { HttpRequest } from '../shared/closed-loop.js';
import { processSeconds } from '../shared/cpu-share.js';
import { batchRequests } from '../writes/batch.js';
import { alternate, ratios } from '../shared/figure.js';
import { ROOT, round, startBare, startStatelog, summary, type Server } from '../shared/lib.js';
import { load, loadOf } from '../shared/load.js';
import { fillKeys } from '../reads/read.js';
import { PUT_KEYS, putRequest, randomKey } from '../writes/write.js';

const options = new Command('bench/profiling/versus-commit.ts')
  .requiredOption('--base <commit>', 'the commit to compare the working tree with')
  .option('--get', 'GET of a key instead of PUT', false)
  .option('--batch', 'POST /v1/records of 100 sets instead of PUT', false)
  .option('--rounds <n>', 'rounds', Number, 6)
  .option('--seconds <n>', 'seconds of load a side a round', Number, 3)
  .parse()
  .opts<{ base: string; get: boolean; batch: boolean; rounds: number; seconds: number }>();

const kind = options.get ? 'get' : options.batch ? 'batch' : 'put';
const next = (): HttpRequest => (options.get ? { method: 'GET', path: `/v1/keys/${randomKey()}` } : putRequest());
const batches = batchRequests();
const loadSide = (url: string, seconds: number) =>
  kind === 'batch' ? load({ url, connections: 50, seconds, requests: batches }) : loadOf(url, 50, seconds, next);
const baseBuild = buildCommit(options.base);
// The bare route parses a PUT body only: a batch compares the two builds alone.
const servers: Partial<Record<'working tree' | 'base' | 'bare', Server>> = {
  'working tree': await startStatelog({}, { entry: 'dist/server.js' }),
  base: await startStatelog({}, { entry: join(baseBuild, 'server.js') }),
  ...(kind === 'batch' ? {} : { bare: await startBare() }),
};
type Side = keyof typeof servers;
const sides = Object.keys(servers) as Side[];
try {
  if (options.get) for (const side of ['working tree', 'base'] as const) await fillKeys(servers[side]!.url, PUT_KEYS);
  for (const side of sides) await loadSide(servers[side]!.url, 1);
  const runs = await alternate(options.rounds, sides, async (side, index) => {
    const pid = servers[side]!.proc.pid!;
    const cpuBefore = processSeconds(pid);
    const result = await loadSide(servers[side]!.url, options.seconds);
    const cpuUsPerRequest = ((processSeconds(pid) - cpuBefore) * 1e6) / (result.rps * options.seconds);
    console.log(`round ${index + 1}: ${side} ${result.rps.toFixed(0)} req/s, p99 ${result.p99.toFixed(1)} ms, ${cpuUsPerRequest.toFixed(1)} µs CPU a request`);
    return { rps: result.rps, p99: result.p99, cpuUsPerRequest };
  });
  const pick = (side: Side, field: 'rps' | 'p99' | 'cpuUsPerRequest') => runs[side].map((run) => round(run[field]));
  const figures = {
    'working tree / base (req/s)': summary(ratios(pick('working tree', 'rps'), pick('base', 'rps')).map((r) => round(r, 3))),
    'working tree CPU µs a request': summary(pick('working tree', 'cpuUsPerRequest')),
    'base CPU µs a request': summary(pick('base', 'cpuUsPerRequest')),
    ...(servers.bare && {
      'working tree / bare (req/s)': summary(ratios(pick('working tree', 'rps'), pick('bare', 'rps')).map((r) => round(r, 3))),
      'base / bare (req/s)': summary(ratios(pick('base', 'rps'), pick('bare', 'rps')).map((r) => round(r, 3))),
    }),
  };
  for (const [label, s] of Object.entries(figures)) console.log(`${label}: ${round(s.median, 3)} [${s.min} – ${s.max}]`);
  const file = join(ROOT, 'bench', 'results', `versus-${options.base}-${kind}-${new Date().toISOString().slice(0, 10)}.json`);
  writeFileSync(file, `${JSON.stringify({ ...options, load: kind.toUpperCase(), connections: 50, figures, runs }, null, 2)}\n`);
  console.log(`results: ${file}`);
} finally {
  for (const side of sides) await servers[side]!.stop();
  rmSync(baseBuild, { recursive: true, force: true });
}
