// CPU time a batch record, from /proc, of servers that differ by build or environment:
// the batch figure's load (POST /v1/records, 100 sets of random keys a batch, 50
// connections, STATELOG_SYNC=full) on each in turn, the first side rotating. With
// --profile, one V8 CPU profile of the first side under the same load instead, its
// self time summed by function and by file.
//   npx tsx bench/profiling/batch-cpu.ts [--rounds 6 --seconds 3 --rate 1000] 'name=entry[;ENV=value...]' ...
//   npx tsx bench/profiling/batch-cpu.ts --profile --seconds 8 'as built=dist/server.js'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { batchRequests } from '../writes/batch.js';
import { processSeconds } from '../shared/cpu-share.js';
import { loadAverage } from '../shared/facts.js';
import { alternate, ratios } from '../shared/figure.js';
import { round, startStatelog, summary, type Server } from '../shared/lib.js';
import { load } from '../shared/load.js';

const program = new Command('bench/profiling/batch-cpu.ts')
  .argument('<sides...>', 'name=entry[;ENV=value...] (the first side is the baseline)')
  .option('--rounds <n>', 'rounds', Number, 6)
  .option('--seconds <n>', 'seconds of load a side a round', Number, 3)
  .option('--rate <n>', 'batches a second in all instead of as fast as answered: the same group sizes for every side', Number)
  .option('--profile', 'a V8 CPU profile of the first side instead', false)
  .parse();
const options = program.opts<{ rounds: number; seconds: number; rate?: number; profile: boolean }>();
const RECORDS = 100;
const requests = batchRequests(RECORDS);
const batches = (url: string, seconds: number) => load({ url, connections: 50, seconds, requests, ...(options.rate ? { rate: options.rate } : {}) });

const sides = program.args.map((arg) => {
  const [name, rest] = [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)];
  const [entry, ...envs] = rest.split(';');
  if (!name || !entry) throw new Error(`not name=entry[;ENV=value...]: ${arg}`);
  return { name, entry, env: Object.fromEntries(envs.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)])) };
});

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

/** Self time of a V8 CPU profile by function and by file, as shares of the busy (non-idle) time. */
function printProfile(file: string): void {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] };
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const byFunction = new Map<string, number>();
  const byFile = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const frame = byId.get(id)!.callFrame;
    if (frame.functionName === '(idle)') return;
    const dt = profile.timeDeltas[i] ?? 0;
    busy += dt;
    const where = frame.url.replace(/^.*\/(node_modules|dist|\.variant-[^/]+)\//, '$1/');
    const fn = `${frame.functionName || '(anonymous)'} ${where}:${frame.lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + dt);
    byFile.set(where || '(native)', (byFile.get(where || '(native)') ?? 0) + dt);
  });
  const top = (map: Map<string, number>, n: number) =>
    [...map].sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, us]) => `${((100 * us) / busy).toFixed(1).padStart(5)} %  ${name}`).join('\n');
  console.log(`busy ${(busy / 1e6).toFixed(2)} s\n\nby function (self time):\n${top(byFunction, 45)}\n\nby file:\n${top(byFile, 30)}`);
}

const loadBefore = loadAverage();
if (options.profile) {
  const side = sides[0]!;
  const dir = mkdtempSync(join(tmpdir(), 'statelog-batch-prof-'));
  const server = await startStatelog(side.env, { entry: side.entry, output: 'discard', nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${dir}`] });
  let result;
  try {
    await batches(server.url, 1);
    result = await batches(server.url, options.seconds);
  } finally {
    await server.stop();
  }
  console.log(`${side.name}: ${(result.rps * RECORDS).toFixed(0)} records/s while profiled (load average ${loadBefore.join(', ')} before)`);
  printProfile(join(dir, readdirSync(dir).find((name) => name.endsWith('.cpuprofile'))!));
  rmSync(dir, { recursive: true, force: true });
} else {
  const names = sides.map((s) => s.name);
  const servers = new Map<string, Server>();
  try {
    for (const side of sides) servers.set(side.name, await startStatelog(side.env, { entry: side.entry, output: 'discard' }));
    for (const name of names) await batches(servers.get(name)!.url, 1);
    const runs = await alternate(options.rounds, names, async (name, index) => {
      const pid = servers.get(name)!.proc.pid!;
      const before = processSeconds(pid);
      const result = await batches(servers.get(name)!.url, options.seconds);
      const cpuUs = ((processSeconds(pid) - before) * 1e6) / (result.requests * RECORDS);
      console.log(`round ${index + 1}: ${name} ${(result.rps * RECORDS).toFixed(0)} records/s, p99 ${result.p99.toFixed(1)} ms, ${cpuUs.toFixed(2)} µs CPU a record`);
      return { rps: result.rps * RECORDS, cpuUs };
    });
    console.log(`\nmedian of the rounds [min – max] (load average ${loadBefore.join(', ')} before, ${loadAverage().join(', ')} after):`);
    for (const name of names) {
      const cpu = summary(runs[name]!.map((r) => r.cpuUs));
      const ratio = summary(ratios(runs[name]!.map((r) => r.cpuUs), runs[names[0]!]!.map((r) => r.cpuUs)));
      const rps = summary(runs[name]!.map((r) => r.rps));
      console.log(
        `${name}: ${round(cpu.median, 2)} µs CPU a record [${round(cpu.min, 2)} – ${round(cpu.max, 2)}], ` +
          `${round(ratio.median, 3)} × ${names[0]}'s [${round(ratio.min, 3)} – ${round(ratio.max, 3)}]; ${Math.round(rps.median)} records/s`,
      );
    }
  } finally {
    for (const server of servers.values()) await server.stop();
  }
}
