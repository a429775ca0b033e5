// Where the machine's CPU went during a measurement, from /proc (Linux): the share of all
// cores that was busy, and the cores used by named groups of processes (the servers, the
// database, the load generator in this process). Tells a limit of the code from a limit
// of a machine whose cores are all taken.
import { readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';

/** Clock ticks a second of /proc's CPU times (USER_HZ, 100 on Linux). */
const TICKS = 100;

/** The pids of every process whose command name is `comm` (such as postgres). */
export function pidsNamed(comm: string): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === comm;
      } catch {
        return false; // gone meanwhile
      }
    });
}

/** User + system CPU seconds of a process so far; 0 once it is gone. */
export function processSeconds(pid: number): number {
  try {
    // Fields 14 and 15 of /proc/<pid>/stat, counted after the command name's ')'.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS;
  } catch {
    return 0;
  }
}

/** Busy and total CPU seconds of the whole machine so far, from /proc/stat's first line. */
function machineSeconds(): { busy: number; total: number } {
  const ticks = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = ticks.reduce((sum, n) => sum + n, 0);
  const idle = ticks[3]! + ticks[4]!; // idle + iowait
  return { busy: (total - idle) / TICKS, total: total / TICKS };
}

export interface CpuShare {
  /** Busy share of all the machine's cores, 0..1. */
  machineBusy: number;
  /** Cores used by each group on average (1 = one core all the time). */
  cores: Record<string, number>;
}

/**
 * Measures while `work` runs. `groups` name the pids to account for (read when the
 * measurement starts and again at its end, so that processes started meanwhile count);
 * this process is counted as "load generator" unless `generatorCores` reads the cores of
 * a generator in processes of its own from the work's result.
 */
export async function measureCpu<T>(
  groups: Record<string, () => number[]>,
  work: () => Promise<T>,
  generatorCores?: (result: T) => number,
): Promise<{ result: T; cpu: CpuShare }> {
  const sample = () => {
    const own = process.cpuUsage();
    return {
      at: performance.now(),
      machine: machineSeconds(),
      groups: Object.fromEntries(Object.entries(groups).map(([name, pids]) => [name, new Map(pids().map((pid) => [pid, processSeconds(pid)]))])),
      self: (own.user + own.system) / 1e6,
    };
  };
  const before = sample();
  const result = await work();
  const after = sample();
  const seconds = (after.at - before.at) / 1000;
  const cores: Record<string, number> = {};
  for (const [name, pids] of Object.entries(after.groups)) {
    let used = 0;
    for (const [pid, total] of pids) used += total - (before.groups[name]!.get(pid) ?? 0);
    cores[name] = round(used / seconds);
  }
  cores['load generator'] = round(generatorCores ? generatorCores(result) : (after.self - before.self) / seconds);
  const machine = { busy: after.machine.busy - before.machine.busy, total: after.machine.total - before.machine.total };
  return { result, cpu: { machineBusy: round(machine.busy / machine.total), cores } };
}

const round = (n: number) => Math.round(n * 100) / 100;

/** "94 % of 2 cores busy: statelog 0.61, PostgreSQL 0.72, load generator 0.52". */
export function describeCpu(cpu: CpuShare): string {
  const parts = Object.entries(cpu.cores).map(([name, cores]) => `${name} ${cores.toFixed(2)}`);
  return `${Math.round(cpu.machineBusy * 100)} % of ${cpus().length} cores busy: ${parts.join(', ')}`;
}
