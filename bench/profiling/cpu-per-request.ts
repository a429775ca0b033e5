// CPU time a request, from /proc, of servers that differ by build or by environment:
// the c = 50 PUT load on each in turn (the first side rotating), for the same rounds.
// CPU time a request is what a code change moves even when the shared machine's other
// jobs move the req/s; the servers' req/s, p99 and the PUTs a group commit carried
// (from /metrics: larger groups cost less a request) are shown beside it.
//   npx tsx bench/profiling/cpu-per-request.ts [--rounds 6 --seconds 3] 'name=entry[;ENV=value...]' ...
// where entry is a compiled server (dist/server.js, or a build of a variant in .variant-x/).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { Command } from 'commander';
import { loadAverage } from '../shared/facts.js';
import { processSeconds } from '../shared/cpu-share.js';
import { alternate, ratios } from '../shared/figure.js';
import { round, startStatelog, summary, type Server } from '../shared/lib.js';
import { load, prebuilt } from '../shared/load.js';
import { putRequest } from '../writes/write.js';

const program = new Command('bench/profiling/cpu-per-request.ts')
  .argument('<sides...>', "name=entry[;ENV=value...] (the first side is the baseline)")
  .option('--rounds <n>', 'rounds', Number, 6)
  .option('--seconds <n>', 'seconds of load a side a round', Number, 3)
  .option('--rate <n>', 'PUTs a second in all instead of as fast as answered: the same group sizes for every side', Number)
  .option('--out <file>', 'also write the figures as JSON (bench/results/<date>-cpu-variants.json is shown by bench/shared/report.ts)')
  .option('--note <text...>', 'notes kept with the figures (shown under the table)')
  .parse();
const options = program.opts<{ rounds: number; seconds: number; rate?: number; out?: string; note?: string[] }>();
const put = (url: string, seconds: number) => load({ url, connections: 50, seconds, requests: prebuilt(putRequest), ...(options.rate ? { rate: options.rate } : {}) });
const loadBefore = loadAverage();

const sides = program.args.map((arg) => {
  const [name, rest] = [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)];
  const [entry, ...envs] = rest.split(';');
  if (!name || !entry) throw new Error(`not name=entry[;ENV=value...]: ${arg}`);
  return { name, entry, env: Object.fromEntries(envs.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)])) };
});
const names = sides.map((s) => s.name);

/** Group commits so far, from the server's /metrics; null for a server without them (the bare route). */
async function groupCommits(url: string): Promise<number | null> {
  const answer = await fetch(`${url}/metrics`).catch(() => null);
  if (!answer?.ok) return null;
  const count = /^statelog_group_commit_duration_seconds_count (\d+)/m.exec(await answer.text());
  return count ? Number(count[1]) : null;
}

const servers = new Map<string, Server>();
try {
  for (const side of sides) {
    // Access-log lines go into a pipe that is read and dropped, as a log shipper would take them.
    servers.set(side.name, await startStatelog(side.env, { entry: side.entry, output: 'discard' }));
  }
  for (const name of names) await put(servers.get(name)!.url, 1);
  const runs = await alternate(options.rounds, names, async (name, index) => {
    const { url, proc } = servers.get(name)!;
    const groupsBefore = await groupCommits(url);
    const before = processSeconds(proc.pid!);
    const result = await put(url, options.seconds);
    const cpuUs = ((processSeconds(proc.pid!) - before) * 1e6) / result.requests;
    const groupsAfter = await groupCommits(url);
    // The scrape itself is not a PUT; the warm-up's groups are not counted either.
    const perGroup = groupsBefore === null || groupsAfter === null ? NaN : result.requests / Math.max(1, groupsAfter - groupsBefore);
    console.log(`round ${index + 1}: ${name} ${result.rps.toFixed(0)} req/s, p99 ${result.p99.toFixed(1)} ms, ${cpuUs.toFixed(1)} µs CPU a request, ${perGroup.toFixed(1)} PUTs a group`);
    return { rps: result.rps, p99: result.p99, cpuUs, perGroup };
  });
  const pick = (name: string, field: 'rps' | 'p99' | 'cpuUs' | 'perGroup') => runs[name]!.map((r) => r[field]);
  console.log('\nmedian of the rounds [min – max]:');
  const figures = [];
  for (const name of names) {
    const cpu = summary(pick(name, 'cpuUs'));
    const cpuRatio = summary(ratios(pick(name, 'cpuUs'), pick(names[0]!, 'cpuUs')));
    const rps = summary(pick(name, 'rps'));
    const perGroup = summary(pick(name, 'perGroup'));
    figures.push({ name, cpuUs: cpu, ratioToFirst: cpuRatio, rps, p99: summary(pick(name, 'p99')), putsPerGroup: perGroup });
    console.log(
      `${name}: ${round(cpu.median, 1)} µs CPU a request [${round(cpu.min, 1)} – ${round(cpu.max, 1)}], ` +
        `${round(cpuRatio.median, 3)} × ${names[0]}'s [${round(cpuRatio.min, 3)} – ${round(cpuRatio.max, 3)}]; ` +
        `${Math.round(rps.median)} req/s, p99 ${round(summary(pick(name, 'p99')).median)} ms, ${round(perGroup.median, 1)} PUTs a group`,
    );
  }
  if (options.out) {
    const command = `npx tsx bench/profiling/cpu-per-request.ts --rounds ${options.rounds} --seconds ${options.seconds}${options.rate ? ` --rate ${options.rate}` : ''} ${program.args.map((a) => `'${a}'`).join(' ')}`;
    const saved = { at: new Date().toISOString(), command, rounds: options.rounds, seconds: options.seconds, rate: options.rate ?? null, load: { before: loadBefore, after: loadAverage() }, sides: figures, notes: options.note ?? [] };
    mkdirSync(dirname(options.out), { recursive: true });
    writeFileSync(options.out, `${JSON.stringify(saved, null, 2)}\n`);
    console.log(`results: ${options.out}`);
  }
} finally {
  for (const server of servers.values()) await server.stop();
}
