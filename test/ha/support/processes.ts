// Child processes of the HA harness: spawned with their output in log files, found again
// through /proc (PostgreSQL's postmaster is started by Patroni in its own session, so it is
// no child of ours), and killed at once with SIGKILL.
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync } from 'node:fs';

export interface Spawned {
  proc: ChildProcess;
  log: string;
  exited: Promise<void>;
}

/** Starts `command` with stdout and stderr appended to `log`. */
export function spawnLogged(command: string, args: string[], log: string, options: SpawnOptions = {}): Spawned {
  const fd = openSync(log, 'a');
  try {
    const proc = spawn(command, args, { ...options, stdio: ['ignore', fd, fd] });
    const exited = new Promise<void>((done) => {
      if (proc.exitCode !== null || proc.signalCode !== null) done();
      proc.once('exit', () => done());
      proc.once('error', () => done());
    });
    return { proc, log, exited };
  } finally {
    closeSync(fd);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Each live process's parent, from /proc. */
function parents(): Map<number, number> {
  const result = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The command name (field 2) may hold spaces and parentheses: the fields after its ')' are fixed.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      result.set(Number(entry), ppid);
    } catch {
      // Gone between the listing and the read.
    }
  }
  return result;
}

/** `pids` and all their descendants that are alive now. */
export function withDescendants(pids: number[]): number[] {
  const tree = parents();
  const found = new Set(pids.filter((pid) => tree.has(pid)));
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, ppid] of tree) {
      if (!found.has(pid) && found.has(ppid)) {
        found.add(pid);
        grew = true;
      }
    }
  }
  return [...found];
}

/** Live processes whose command line mentions `text` (a temporary directory's path). */
export function processesMentioning(text: string): number[] {
  const result: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(text)) result.push(Number(entry));
    } catch {
      // Gone.
    }
  }
  return result;
}

/** The postmaster's pid from its data directory, if it runs. */
export function postmasterPid(dataDir: string): number | null {
  const file = `${dataDir}/postmaster.pid`;
  if (!existsSync(file)) return null;
  const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
  return pid > 0 && alive(pid) ? pid : null;
}

/** SIGKILL to every pid at the same moment (no process gets to react to another's death), then waits for them to go. */
export async function killAll(pids: number[], timeoutMs = 5000): Promise<void> {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  const deadline = Date.now() + timeoutMs;
  // A killed child stays a zombie until node reaps it: alive() sees it until then.
  while (pids.some((pid) => alive(pid) && !isZombie(pid))) {
    if (Date.now() > deadline) throw new Error(`processes survived SIGKILL: ${pids.filter(alive).join(', ')}`);
    await new Promise((done) => setTimeout(done, 20));
  }
}

function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

/** The last `lines` lines of a log file. */
export function tail(file: string, lines = 60): string {
  if (!existsSync(file)) return '(no log)';
  return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
}
