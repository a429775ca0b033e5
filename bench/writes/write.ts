// Durable PUT throughput and latency against a bare fastify route that only parses and
// validates the same body (bench/writes/bare-server.ts), measured alternately in one run (the
// machine is noisy), at 50, 1 and 10 connections. Also the comparison helper that
// bench/reads/read.ts uses for GET.
//   npm run bench -- --only write,write-c1,write-c10
import type { HttpRequest } from '../shared/closed-loop.js';
import { describeCpu, measureCpu, type CpuShare } from '../shared/cpu-share.js';
import { alternate, ratios, type Figure, type Metric, type RunSettings } from '../shared/figure.js';
import { startBare, startStatelog, type Server } from '../shared/lib.js';
import { load, prebuilt, type LoadResult } from '../shared/load.js';

/** Keys the PUT load spreads over. */
export const PUT_KEYS = 10_000;

export const randomKey = () => `user_${Math.floor(Math.random() * PUT_KEYS)}`;
export const randomValue = () => `{"balance":${Math.floor(Math.random() * 1e6)},"currency":"EUR"}`;

/** A durable PUT of a small object to a random key of PUT_KEYS. */
export const putRequest = (): HttpRequest => ({ method: 'PUT', path: `/v1/keys/${randomKey()}`, body: `{"value":${randomValue()}}` });

/** A side's run, with the cores the server and the generator used during it. */
export type SideRun = LoadResult & { cpu: CpuShare };

export interface VersusBare {
  statelog: SideRun[];
  bare: SideRun[];
}

/**
 * The settings of a figure that is a ratio to the bare route: twice as many rounds as
 * asked, each half as long. The same load in all, but the two sides of a pair run closer
 * together: this machine's speed drifts by a quarter within tens of seconds (the bare
 * route alone did 17,554 and 10,357 req/s two rounds apart), and a ratio is only as good
 * as its two sides' sharing the same machine.
 */
export function pairedSettings(settings: RunSettings): RunSettings {
  return settings.smoke ? settings : { ...settings, rounds: settings.rounds * 2, seconds: settings.seconds / 2 };
}

/**
 * The same closed-loop load (bench/shared/load.ts) on statelog (STATELOG_SYNC=full) and on the bare fastify
 * server, alternating within each round after a warm-up of each.
 */
export async function versusBare(
  settings: RunSettings,
  connections: number,
  next: () => HttpRequest,
  prepare: (statelog: Server) => Promise<void> = async () => {},
): Promise<VersusBare> {
  const servers = { statelog: await startStatelog(), bare: await startBare() };
  try {
    await prepare(servers.statelog);
    const requests = prebuilt(next);
    const run = (side: keyof typeof servers, seconds: number) => load({ url: servers[side].url, connections, seconds, requests });
    // Warm-up: JIT, page cache, the first pages of the file, connections.
    await run('statelog', settings.warmupSeconds);
    await run('bare', settings.warmupSeconds);
    return await alternate(settings.rounds, ['statelog', 'bare'] as const, async (side, round) => {
      // The cores each side used tell a server short of CPU from a machine whose cores are all taken.
      const { result, cpu } = await measureCpu(
        { server: () => [servers[side].proc.pid!] },
        () => run(side, settings.seconds),
        (loaded) => loaded.generatorCores,
      );
      settings.log(
        `round ${round + 1}: ${side} ${result.rps.toFixed(0)} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms; ${describeCpu(cpu)}`,
      );
      return { ...result, cpu };
    });
  } finally {
    await servers.statelog.stop();
    await servers.bare.stop();
  }
}

/** req/s, p50 and p99 of both sides, and the per-round ratios. */
export function versusBareMetrics(what: string, runs: VersusBare, rpsTarget?: number, p99Target?: number): Metric[] {
  const pick = (side: keyof VersusBare, field: 'rps' | 'p50' | 'p99') => runs[side].map((r) => r[field]);
  const cores = (side: keyof VersusBare, group: string) => runs[side].map((r) => r.cpu.cores[group]!);
  return [
    { label: `statelog ${what}`, unit: 'req/s', values: pick('statelog', 'rps') },
    { label: `bare fastify ${what}`, unit: 'req/s', values: pick('bare', 'rps') },
    {
      label: 'ratio statelog / bare (req/s)',
      unit: '×',
      values: ratios(pick('statelog', 'rps'), pick('bare', 'rps')),
      ...(rpsTarget === undefined ? {} : { target: { op: '>=' as const, value: rpsTarget } }),
    },
    { label: 'statelog p50', unit: 'ms', values: pick('statelog', 'p50') },
    { label: 'statelog p99', unit: 'ms', values: pick('statelog', 'p99') },
    { label: 'bare fastify p50', unit: 'ms', values: pick('bare', 'p50') },
    { label: 'bare fastify p99', unit: 'ms', values: pick('bare', 'p99') },
    {
      label: 'ratio statelog / bare (p99)',
      unit: '×',
      values: ratios(pick('statelog', 'p99'), pick('bare', 'p99')),
      ...(p99Target === undefined ? {} : { target: { op: '<=' as const, value: p99Target } }),
    },
    { label: 'statelog server CPU', unit: 'cores', values: cores('statelog', 'server') },
    { label: 'load generator CPU, statelog rounds', unit: 'cores', values: cores('statelog', 'load generator') },
    { label: 'machine busy, statelog rounds', unit: '%', values: runs.statelog.map((r) => r.cpu.machineBusy * 100) },
    { label: 'bare fastify server CPU', unit: 'cores', values: cores('bare', 'server') },
    { label: 'load generator CPU, bare rounds', unit: 'cores', values: cores('bare', 'load generator') },
    { label: 'machine busy, bare rounds', unit: '%', values: runs.bare.map((r) => r.cpu.machineBusy * 100) },
  ];
}

export const failedRequests = (runs: VersusBare) => [...runs.statelog, ...runs.bare].reduce((n, r) => n + r.errors, 0);

export function writeFigure(connections: number): Figure {
  return {
    name: connections === 50 ? 'write' : `write-c${connections}`,
    title: `Durable PUT, c = ${connections}, against a bare fastify route`,
    async run(asked) {
      const settings = pairedSettings(asked);
      const runs = await versusBare(settings, connections, putRequest);
      // The targets are the issue's, at c = 50. With one or ten writers there is little
      // to group: each write waits for its own fsync, which the bare route never does,
      // so those figures show what a lone writer pays (one fsync of this disk is in the
      // machine facts), not a ratio to meet.
      const metrics = connections === 50 ? versusBareMetrics('PUT', runs, 0.7, 1.5) : versusBareMetrics('PUT', runs);
      return {
        scale: `${connections} connections, ${settings.seconds} s a side a round, ${PUT_KEYS.toLocaleString()} keys, STATELOG_SYNC=full`,
        settings: { connections, seconds: settings.seconds, rounds: settings.rounds, keys: PUT_KEYS, sync: 'full', failedRequests: failedRequests(runs) },
        metrics,
        details: runs,
      };
    },
  };
}
