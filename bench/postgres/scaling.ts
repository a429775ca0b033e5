// Whether the PostgreSQL write path scales with statelog nodes when each node is confined
// like a machine of its own: durable PUTs (STATELOG_SYNC=full) of a small object over
// 10,000 keys, closed loop, on SQLite (one node, the reference) and on PostgreSQL with 1, 2
// and 4 nodes on one database, without and with a synchronous standby, and 8 writers in all
// with and without it. Each (side, round) gets a fresh database and fresh nodes.
//   npm run bench -- --only postgres-scaling          (also in npm run bench:postgres)
// Settings (environment): STATELOG_BENCH_NODE_CORES (0.2: each node's quota, in cores),
// STATELOG_BENCH_LOAD_CORES (0.8: the load generator's), STATELOG_BENCH_SCALING_CONNECTIONS
// (64 in all, spread evenly over the nodes), STATELOG_BENCH_SCALING_SIDES (some sides by name,
// pg1,pg4: every side by default), STATELOG_BENCH_SCALING_PER_NODE=1 (the connections are each
// node's, as when every machine added brings its clients, not all of them),
// STATELOG_BENCH_STANDBY_DELAY_MS (0.5: held each way on the standby's replication
// connection by bench/postgres/standby-link.ts, as a standby on another machine; 0: loopback).
//
// Confinement: a CPU cgroup per node and one for the load generator, under
// /sys/fs/cgroup/cpu/statelog-bench-<pid>/ (cgroup v1: cpu.cfs_quota_us per 100 ms period;
// v2: cpu.max). Without a writable one the figure says why and reports no ratio: on shared
// cores a ratio of node counts says nothing about scaling. The groups are removed at the
// end (their processes moved back to this process's group first), leftovers of killed
// runs at the start. A group's CPU is the sum over its processes (/proc, as
// bench/shared/cpu-share.ts counts); its throttling is its cpu.stat.
// The load generator is a child process of its own (this file run as a script, driven by
// IPC), alone in its group: the coordination here (starting nodes, reading /proc) neither
// eats its quota nor counts as load. Its quota is far above what it uses; each round shows
// its CPU and throttling, so a figure it bound can be told.
// PostgreSQL: a private primary and a streaming standby (Debian's PostgreSQL 15 binaries,
// as the postgres OS user, in a temporary folder, on free loopback ports; the server at
// 127.0.0.1:5432 is not touched), fsync on, synchronous_commit on. It is not confined: it
// stands in for the database machine, and has what the groups leave of the cores. The
// no-standby sides use the same primary with synchronous_standby_names = '' (the standby
// still streams, asynchronously), so that the two differ only by the commit's wait for it.
import { execFileSync, fork, spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { HttpClient, type LoopResult } from '../shared/closed-loop.js';
import { measureCpu, type CpuShare } from '../shared/cpu-share.js';
import { alternate, ratios, type Figure, type Metric, type RunSettings } from '../shared/figure.js';
import { envNumber, freePort, isMain, ROOT, sleep, startStatelog, type Server } from '../shared/lib.js';
import { PUT_KEYS } from '../writes/write.js';
import { Databases, putLoad } from './shared.js';
import { DelayedLink } from './standby-link.js';

// ---------------------------------------------------------------- CPU groups

/**
 * The quota's period: a group runs its share of each, then waits for the next. A long one
 * (the kernel's 100 ms) freezes a confined node for most of every period, holding each of its
 * commits' round trips; a machine that is slower runs all the time. Settable
 * (STATELOG_BENCH_CFS_PERIOD_US) to see what that difference does.
 */
const PERIOD_US = envNumber('STATELOG_BENCH_CFS_PERIOD_US', 100_000);
const GROUP_PREFIX = 'statelog-bench-';

interface Hierarchy {
  version: 1 | 2;
  root: string;
  /** This process's own group, where confined processes go back to. */
  home: string;
}

/** The cpu controller's hierarchy, or why there is none. */
function cpuHierarchy(): Hierarchy | string {
  const own = readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n').map((line) => line.split(':'));
  const at = (root: string, path: string | undefined) => (path && existsSync(join(root, path)) ? join(root, path) : root);
  for (const root of ['/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct']) {
    if (existsSync(join(root, 'cpu.cfs_quota_us'))) return { version: 1, root, home: at(root, own.find(([, names]) => names?.split(',').includes('cpu'))?.[2]) };
  }
  const root = '/sys/fs/cgroup';
  const controllers = join(root, 'cgroup.controllers');
  if (existsSync(controllers) && readFileSync(controllers, 'utf8').split(/\s+/).includes('cpu')) {
    return { version: 2, root, home: at(root, own.find(([id]) => id === '0')?.[2]) };
  }
  return 'no CPU cgroup here: neither v1 (/sys/fs/cgroup/cpu/cpu.cfs_quota_us) nor v2 with the cpu controller (/sys/fs/cgroup/cgroup.controllers)';
}

/** Counters of a group's cpu.stat: periods it ran in, periods it was throttled in, time throttled. */
interface Throttling {
  periods: number;
  throttled: number;
  throttledMs: number;
}

/** CPU groups with a quota each, under one parent group of this process's. */
class CpuGroups {
  private constructor(
    readonly hierarchy: Hierarchy,
    private readonly dir: string,
  ) {}

  /** A group per name with its quota in cores, or why there cannot be. */
  static create(quotas: Record<string, number>): CpuGroups | string {
    const hierarchy = cpuHierarchy();
    if (typeof hierarchy === 'string') return hierarchy;
    for (const entry of readdirSync(hierarchy.root)) {
      const pid = Number(entry.startsWith(GROUP_PREFIX) ? entry.slice(GROUP_PREFIX.length) : NaN);
      if (pid > 0 && !existsSync(`/proc/${pid}`)) new CpuGroups(hierarchy, join(hierarchy.root, entry)).remove();
    }
    const groups = new CpuGroups(hierarchy, join(hierarchy.root, `${GROUP_PREFIX}${process.pid}`));
    try {
      mkdirSync(groups.dir);
      // v2 hands the cpu controller down one level at a time.
      if (hierarchy.version === 2) for (const dir of [hierarchy.root, groups.dir]) writeFileSync(join(dir, 'cgroup.subtree_control'), '+cpu');
      // The parent competes with the unconfined processes (PostgreSQL) as one: it weighs
      // as much as one process per group, so that a group's quota, not its weight, binds.
      const count = Object.keys(quotas).length;
      if (hierarchy.version === 1) writeFileSync(join(groups.dir, 'cpu.shares'), String(1024 * count));
      else writeFileSync(join(groups.dir, 'cpu.weight'), String(100 * count));
      for (const [name, cores] of Object.entries(quotas)) {
        mkdirSync(join(groups.dir, name));
        const quota = String(Math.round(cores * PERIOD_US));
        if (hierarchy.version === 1) {
          groups.write(name, 'cpu.cfs_period_us', String(PERIOD_US));
          groups.write(name, 'cpu.cfs_quota_us', quota);
        } else {
          groups.write(name, 'cpu.max', `${quota} ${PERIOD_US}`);
        }
      }
      // Moving a process in and out is what the figure does; this process, for a moment.
      groups.place(Object.keys(quotas)[0]!, process.pid);
      writeFileSync(join(hierarchy.home, 'cgroup.procs'), String(process.pid));
    } catch (err) {
      try {
        groups.remove();
      } catch {
        // What could not be made cannot be removed either.
      }
      return `cannot confine processes in ${groups.dir}: ${(err as Error).message}`;
    }
    return groups;
  }

  private write(name: string, file: string, value: string): void {
    writeFileSync(join(this.dir, name, file), value);
  }

  /** Moves the process (all its threads; its later children are born in the group). */
  place(name: string, pid: number): void {
    this.write(name, 'cgroup.procs', String(pid));
  }

  stat(name: string): Throttling {
    const fields = new Map(
      readFileSync(join(this.dir, name, 'cpu.stat'), 'utf8')
        .trim()
        .split('\n')
        .map((line) => [line.split(' ')[0]!, Number(line.split(' ')[1])]),
    );
    const throttledMs = this.hierarchy.version === 1 ? (fields.get('throttled_time') ?? 0) / 1e6 : (fields.get('throttled_usec') ?? 0) / 1e3;
    return { periods: fields.get('nr_periods') ?? 0, throttled: fields.get('nr_throttled') ?? 0, throttledMs };
  }

  /** Every process back into this process's group, then the groups removed. */
  remove(): void {
    if (!existsSync(this.dir)) return;
    for (const entry of readdirSync(this.dir, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const group = join(this.dir, entry.name);
      for (const pid of readFileSync(join(group, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
        try {
          writeFileSync(join(this.hierarchy.home, 'cgroup.procs'), pid);
        } catch {
          // Exited meanwhile.
        }
      }
      rmdirSync(group);
    }
    rmdirSync(this.dir);
  }
}

// ---------------------------------------------------------------- the private PostgreSQL

const PG_BIN = '/usr/lib/postgresql/15/bin';
const STANDBY_NAME = 'standby';

interface Postgres {
  proc: ChildProcess;
  log: string;
  exited: Promise<void>;
}

const running = (server: Postgres) => server.proc.exitCode === null && server.proc.signalCode === null;
const logTail = (log: string) => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-30).join('\n') : '(no log)');

/** The postmaster and its backends, which are all its direct children. */
function withChildren(pid: number): number[] {
  try {
    return [pid, ...readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').filter(Boolean).map(Number)];
  } catch {
    return [];
  }
}

/** Polls `probe` until it gives a value; fails at once, with the server's log, if the server exits. */
async function until<T>(server: Postgres, what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    if (!running(server)) throw new Error(`PostgreSQL exited while waiting for ${what}:\n${logTail(server.log)}`);
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? ` (${String(last)})` : ''}:\n${logTail(server.log)}`);
    await sleep(100);
  }
}

/** A primary and its streaming standby, started for the figure and deleted after it. */
class PrivateCluster {
  private primary?: Postgres;
  private standby?: Postgres;
  private admin?: pg.Client;
  private synchronous = false;
  /** The primary's maintenance database. */
  url = '';

  private link?: DelayedLink;

  private constructor(
    private readonly dir: string,
    /** Held each way on the replication connection; 0: the standby connects straight. */
    private readonly linkDelayMs: number,
  ) {}

  static async start(linkDelayMs: number): Promise<PrivateCluster> {
    const missing = ['initdb', 'pg_basebackup', 'postgres'].filter((bin) => !existsSync(join(PG_BIN, bin)));
    if (missing.length > 0) throw new Error(`missing ${missing.map((bin) => join(PG_BIN, bin)).join(', ')}: apt-get install postgresql-15`);
    const cluster = new PrivateCluster(mkdtempSync(join(tmpdir(), 'statelog-bench-pg-')), linkDelayMs);
    try {
      await cluster.boot();
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  /** PostgreSQL refuses to run as root: as root, its processes are the postgres user's. */
  private spawnOptions(): SpawnOptions {
    const env = { PATH: process.env.PATH, HOME: this.dir, LANG: 'C.UTF-8' };
    if (process.getuid?.() !== 0) return { cwd: this.dir, env };
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    return { cwd: this.dir, env, uid: id('-u'), gid: id('-g') };
  }

  private tool(bin: string, args: string[]): void {
    const run = spawnSync(join(PG_BIN, bin), args, { ...this.spawnOptions(), encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`${bin} ${args.join(' ')} failed (${run.status ?? run.signal}): ${run.stderr || run.error?.message}`);
  }

  /** A postmaster in the foreground, its output in `name`.log. */
  private server(dataDir: string, port: number, settings: string[], name: string): Postgres {
    // A standby refuses to recover with fewer connections or WAL senders than its primary: both get the same.
    const common = ['listen_addresses=127.0.0.1', 'unix_socket_directories=', 'max_connections=200', 'max_wal_senders=4', 'wal_level=replica', 'fsync=on'];
    const flags = [`port=${port}`, ...common, ...settings].flatMap((s) => ['-c', s]);
    const log = join(this.dir, `${name}.log`);
    const fd = openSync(log, 'a');
    try {
      const proc = spawn(join(PG_BIN, 'postgres'), ['-D', dataDir, ...flags], { ...this.spawnOptions(), stdio: ['ignore', fd, fd] });
      return { proc, log, exited: new Promise((done) => proc.once('exit', () => done())) };
    } finally {
      closeSync(fd);
    }
  }

  private async boot(): Promise<void> {
    const options = this.spawnOptions();
    if (options.uid !== undefined) chownSync(this.dir, options.uid, options.gid!);
    const [primaryDir, standbyDir] = [join(this.dir, 'primary'), join(this.dir, 'standby')];
    this.tool('initdb', ['-D', primaryDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C']);
    const port = await freePort();
    // synchronous_standby_names stays off the command line, which would outrank setSynchronous's ALTER SYSTEM.
    const primary = this.server(primaryDir, port, ['synchronous_commit=on'], 'primary');
    this.primary = primary;
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    this.admin = await until(primary, 'the private primary', async () => {
      const client = new pg.Client(this.url);
      try {
        await client.connect();
        return client;
      } catch (err) {
        await client.end().catch(() => undefined);
        throw err;
      }
    });
    this.tool('pg_basebackup', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-D', standbyDir, '-X', 'stream', '-R']);
    // The standby streams through the link: what it confirms reaches the primary a round trip later.
    this.link = this.linkDelayMs > 0 ? await DelayedLink.start(port, this.linkDelayMs) : undefined;
    const conninfo = `host=127.0.0.1 port=${this.link?.port ?? port} user=postgres application_name=${STANDBY_NAME}`;
    const standby = this.server(standbyDir, await freePort(), [`primary_conninfo=${conninfo}`, 'hot_standby=on'], 'standby');
    this.standby = standby;
    await until(standby, 'the standby to stream', async () => ((await this.replication()) === 'async' ? true : undefined));
  }

  get client(): pg.Client {
    return this.admin!;
  }

  /** The standby's sync_state as the primary sees it (sync, async), if it streams. */
  private async replication(): Promise<string | undefined> {
    const { rows } = await this.client.query<{ sync_state: string }>(
      "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'",
      [STANDBY_NAME],
    );
    return rows[0]?.sync_state;
  }

  /** Commits wait for the standby's flush, or not; resolves once the primary says so. */
  async setSynchronous(on: boolean): Promise<void> {
    if (this.synchronous === on) return;
    await this.client.query(`ALTER SYSTEM SET synchronous_standby_names = '${on ? STANDBY_NAME : ''}'`);
    await this.client.query('SELECT pg_reload_conf()');
    const want = on ? 'sync' : 'async';
    await until(this.standby!, `the standby to be ${want}`, async () => ((await this.replication()) === want ? true : undefined), 10_000);
    this.synchronous = on;
  }

  /** What the standby's link adds to a round trip, in ms (0 without one). */
  async linkRoundTripMs(): Promise<number> {
    return this.link ? this.link.addedRoundTripMs(this.url) : 0;
  }

  async version(): Promise<string> {
    return (await this.client.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v;
  }

  /** The server's processes now. */
  pids(which: 'primary' | 'standby'): number[] {
    const pid = this[which]?.proc.pid;
    return pid ? withChildren(pid) : [];
  }

  async stop(): Promise<void> {
    await this.admin?.end().catch(() => undefined);
    for (const server of [this.standby, this.primary]) {
      if (!server || !running(server)) continue;
      const pids = withChildren(server.proc.pid!);
      server.proc.kill('SIGINT'); // fast shutdown
      if (await Promise.race([server.exited.then(() => false), sleep(20_000).then(() => true)])) {
        for (const pid of pids) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // Gone meanwhile.
          }
        }
        await server.exited;
      }
    }
    await this.link?.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- the load generator's process

interface LoadJob {
  urls: string[];
  connections: number;
  seconds: number;
}

interface LoadReply {
  result: LoopResult;
  /** Cores this process used during the job. */
  cores: number;
}

/** Runs in the child: `connections` workers over one pool per node, evenly shared. */
async function runJob({ urls, connections, seconds }: LoadJob): Promise<LoadReply> {
  const clients = urls.map((url, i) => new HttpClient(url, Math.ceil((connections - i) / urls.length)));
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  try {
    const result = await putLoad(clients, connections, seconds);
    const used = process.cpuUsage(cpuBefore);
    return { result, cores: (used.user + used.system) / 1e6 / ((performance.now() - started) / 1000) };
  } finally {
    for (const client of clients) await client.close();
  }
}

/** The parent's handle on the load generator's process. */
class LoadProcess {
  private readonly proc: ChildProcess = fork(fileURLToPath(import.meta.url), [], {
    cwd: ROOT,
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  /** Its first message: it listens for jobs (loading this file through tsx takes a moment). */
  private readonly ready = new Promise<void>((resolve, reject) => {
    this.proc.once('message', () => resolve());
    this.proc.once('exit', (code) => reject(new Error(`the load generator's process exited (${code}) on start`)));
  });

  get pid(): number {
    return this.proc.pid!;
  }

  async run(job: LoadJob): Promise<LoadReply> {
    await this.ready;
    return new Promise((resolve, reject) => {
      const exited = (code: number | null) => reject(new Error(`the load generator's process exited (${code}) during a run`));
      this.proc.once('exit', exited);
      this.proc.once('message', (reply: LoadReply | { error: string }) => {
        this.proc.off('exit', exited);
        if ('error' in reply) reject(new Error(`the load generator failed: ${reply.error}`));
        else resolve(reply);
      });
      this.proc.send(job);
    });
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((resolve) => this.proc.once('exit', resolve));
    this.proc.disconnect();
    await exited;
  }
}

if (isMain(import.meta.url)) {
  process.on('disconnect', () => process.exit(0));
  process.on('message', (job: LoadJob) =>
    void runJob(job).then(
      (reply) => process.send!(reply),
      (err: unknown) => process.send!({ error: err instanceof Error ? err.message : String(err) }),
    ),
  );
  process.send!({ ready: true });
}

// ---------------------------------------------------------------- the figure

/** The "8 writers" sides: few enough that each commit's own wait shows. */
const WRITERS = 8;
/**
 * Over 4 nodes, so that the nodes' quotas are the least likely limit and the standby's
 * wait is what the pair differs by.
 */
const WRITER_NODES = 4;
const MAX_NODES = 4;

interface SideSpec {
  label: string;
  store: 'sqlite' | 'postgres';
  nodes: number;
  /** Connections in all; null: the figure's setting. */
  connections: number | null;
  standby: boolean;
}

const SIDES = {
  sqlite: { label: 'SQLite, 1 node', store: 'sqlite', nodes: 1, connections: null, standby: false },
  pg1: { label: 'PostgreSQL, 1 node', store: 'postgres', nodes: 1, connections: null, standby: false },
  pg2: { label: 'PostgreSQL, 2 nodes', store: 'postgres', nodes: 2, connections: null, standby: false },
  pg4: { label: 'PostgreSQL, 4 nodes', store: 'postgres', nodes: 4, connections: null, standby: false },
  sync1: { label: 'PostgreSQL + sync standby, 1 node', store: 'postgres', nodes: 1, connections: null, standby: true },
  sync2: { label: 'PostgreSQL + sync standby, 2 nodes', store: 'postgres', nodes: 2, connections: null, standby: true },
  sync4: { label: 'PostgreSQL + sync standby, 4 nodes', store: 'postgres', nodes: 4, connections: null, standby: true },
  w8: { label: `PostgreSQL, ${WRITERS} writers on ${WRITER_NODES} nodes`, store: 'postgres', nodes: WRITER_NODES, connections: WRITERS, standby: false },
  w8sync: { label: `PostgreSQL + sync standby, ${WRITERS} writers on ${WRITER_NODES} nodes`, store: 'postgres', nodes: WRITER_NODES, connections: WRITERS, standby: true },
} satisfies Record<string, SideSpec>;

type Side = keyof typeof SIDES;
const SIDE_NAMES = Object.keys(SIDES) as Side[];

const nodeGroup = (i: number) => `node${i + 1}`;
const LOAD_GROUP = 'load';

interface Quotas {
  node: number;
  load: number;
}

type SideRun = LoopResult & {
  cpu: CpuShare;
  /** Group commits the nodes made during the measurement (their /metrics). */
  groups: number;
  /** Planned appends refused because another node changed a key the group read (each planned again). */
  conflicts: number;
  /** Transactions PostgreSQL committed in the side's database during it (null on SQLite). */
  transactions: number | null;
  /** Each confined group's cpu.stat counters over the measurement. */
  throttling: Record<string, Throttling>;
  /** What limited it, in words. */
  bound: string;
};

type Usage = Pick<SideRun, 'cpu' | 'throttling'>;

const share = (t: Throttling) => (t.periods > 0 ? t.throttled / t.periods : 0);
const pct = (x: number) => `${Math.round(x * 100)} %`;
const nodeNames = (side: Side) => Array.from({ length: SIDES[side].nodes }, (_, i) => nodeGroup(i));
const nodesCores = (side: Side, run: Usage) => nodeNames(side).reduce((sum, name) => sum + run.cpu.cores[name]!, 0);
/** The nodes' CPU milliseconds per answered request: whether a node's work per write grows with the nodes. */
const nodesMsPerRequest = (side: Side, run: Usage & Pick<SideRun, 'rps'>) => (nodesCores(side, run) * 1000) / run.rps;
const nodesThrottled = (side: Side, run: Usage) => nodeNames(side).reduce((sum, name) => sum + share(run.throttling[name]!), 0) / SIDES[side].nodes;
const loadThrottled = (run: Usage) => share(run.throttling[LOAD_GROUP]!);
const pgCores = (run: Usage) => (run.cpu.cores.PostgreSQL ?? 0) + (run.cpu.cores.standby ?? 0);

/** Answered requests per group commit: how many writes share each round of the write path. */
const requestsPerGroup = (run: Pick<SideRun, 'requests' | 'groups'>) => run.requests / Math.max(1, run.groups);
const conflictShare = (run: Pick<SideRun, 'groups' | 'conflicts'>) => run.conflicts / Math.max(1, run.groups);
const transactionsPerRequest = (run: Pick<SideRun, 'requests' | 'transactions'>) => (run.transactions ?? 0) / Math.max(1, run.requests);

/** The group commits the servers have made so far, and their plan conflicts, from their /metrics. */
async function groupCommits(servers: Server[]): Promise<{ groups: number; conflicts: number }> {
  const sum = { groups: 0, conflicts: 0 };
  for (const server of servers) {
    const lines = (await (await fetch(`${server.url}/metrics`)).text()).split('\n');
    const value = (name: string) => Number(lines.find((l) => l.startsWith(name))?.split(' ').pop() ?? 0);
    sum.groups += value('statelog_group_commit_duration_seconds_count');
    sum.conflicts += value('statelog_write_plan_conflicts_total');
  }
  return sum;
}

/** Which CPU limit a run met: the nodes' quotas, the load generator's, the machine's cores, or none. */
function binding(side: Side, run: Usage, quotas: Quotas): string {
  const reasons: string[] = [];
  const nodesUse = nodesCores(side, run) / (SIDES[side].nodes * quotas.node);
  if (nodesUse >= 0.85 || nodesThrottled(side, run) >= 0.3) {
    reasons.push(`the nodes' quota (${pct(nodesUse)} of it used, throttled in ${pct(nodesThrottled(side, run))} of periods)`);
  }
  const loadUse = run.cpu.cores['load generator']! / quotas.load;
  if (loadUse >= 0.85 || loadThrottled(run) >= 0.05) {
    reasons.push(`the load generator (${pct(loadUse)} of its quota, throttled in ${pct(loadThrottled(run))} of periods)`);
  }
  const postgres = SIDES[side].store === 'postgres' ? `PostgreSQL ${pgCores(run).toFixed(2)} cores` : 'no PostgreSQL';
  if (run.cpu.machineBusy >= 0.9) reasons.push(`the machine's ${cpus().length} cores (${pct(run.cpu.machineBusy)} busy; ${postgres})`);
  if (reasons.length > 0) return reasons.join(' and ');
  return `no CPU limit (${postgres}, machine ${pct(run.cpu.machineBusy)} busy): the commits' waits (fsync${SIDES[side].standby ? ', the standby' : ''})`;
}

interface Context {
  settings: RunSettings;
  groups: CpuGroups;
  cluster: PrivateCluster;
  load: LoadProcess;
  quotas: Quotas;
  connections: number;
  /** Whether `connections` is each node's (the clients grow with the nodes) rather than all of them. */
  perNode: boolean;
  /** Of one side's measurement. */
  seconds: number;
}

/** One side once: a fresh database and fresh nodes, each in its group, warmed up, then measured. */
async function measureSide(ctx: Context, side: Side, round: number): Promise<SideRun> {
  const spec: SideSpec = SIDES[side];
  const dbs = new Databases(ctx.cluster.client, ctx.cluster.url);
  const servers: Server[] = [];
  try {
    // Errors only: each of the many node starts would warn that no token is set.
    let env: Record<string, string> = { LOG_LEVEL: 'error' };
    let db: { name: string; url: string } | null = null;
    if (spec.store === 'postgres') {
      await ctx.cluster.setSynchronous(spec.standby);
      db = await dbs.create(`${side}_${round + 1}`);
      env = { ...env, STATELOG_STORE: 'postgres', DATABASE_URL: db.url };
    }
    // One at a time: the first runs the migrations.
    for (let i = 0; i < spec.nodes; i++) servers.push(await startStatelog(env));
    const connections = spec.connections ?? (ctx.perNode ? ctx.connections * spec.nodes : ctx.connections);
    const job = { urls: servers.map((s) => s.url), connections };
    // Warmed up unconfined, then confined for a moment before the measurement: on a fifth
    // of a core a fresh node's JIT takes some 8 s of load to settle, a node that has run a while has it.
    await ctx.load.run({ ...job, seconds: ctx.settings.warmupSeconds * 2 });
    servers.forEach((server, i) => ctx.groups.place(nodeGroup(i), server.proc.pid!));
    await ctx.load.run({ ...job, seconds: ctx.settings.warmupSeconds });
    const names = [...nodeNames(side), LOAD_GROUP];
    const before = names.map((name) => ctx.groups.stat(name));
    const groupsBefore = await groupCommits(servers);
    const transactionsBefore = db && (await dbs.commits(db.name));
    const { result: reply, cpu } = await measureCpu(
      {
        ...Object.fromEntries(servers.map((s, i) => [nodeGroup(i), () => [s.proc.pid!]])),
        PostgreSQL: () => ctx.cluster.pids('primary'),
        standby: () => ctx.cluster.pids('standby'),
        coordinator: () => [process.pid],
      },
      () => ctx.load.run({ ...job, seconds: ctx.seconds }),
      (r) => r.cores,
    );
    const groupsAfter = await groupCommits(servers);
    const groups = groupsAfter.groups - groupsBefore.groups;
    const conflicts = groupsAfter.conflicts - groupsBefore.conflicts;
    const transactions = db && (await dbs.commits(db.name)) - transactionsBefore!;
    const throttling = Object.fromEntries(
      names.map((name, i) => {
        const [a, b] = [before[i]!, ctx.groups.stat(name)];
        return [name, { periods: b.periods - a.periods, throttled: b.throttled - a.throttled, throttledMs: Math.round(b.throttledMs - a.throttledMs) }];
      }),
    );
    const run = { ...reply.result, cpu, throttling, groups, conflicts, transactions, bound: binding(side, { cpu, throttling }, ctx.quotas) };
    const nodesText = nodeNames(side)
      .map((name) => `${cpu.cores[name]!.toFixed(2)} (${pct(share(throttling[name]!))} throttled)`)
      .join(', ');
    ctx.settings.log(
      `round ${round + 1}: ${spec.label}: ${run.rps.toFixed(0)} req/s, p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(2)} ms; ` +
        `nodes ${nodesText} of ${ctx.quotas.node} core each, ${nodesMsPerRequest(side, run).toFixed(2)} ms a request, ` +
        `${requestsPerGroup(run).toFixed(1)} requests a group commit (${pct(conflictShare(run))} planned again)${transactions === null ? '' : `, ${transactionsPerRequest(run).toFixed(2)} transactions a request`}; PostgreSQL ${pgCores(run).toFixed(2)} cores; ` +
        `load generator ${cpu.cores['load generator']!.toFixed(2)} of ${ctx.quotas.load} (${pct(loadThrottled(run))} throttled); ` +
        `${pct(cpu.machineBusy)} of ${cpus().length} cores busy. Bound by ${run.bound}`,
    );
    return run;
  } finally {
    for (const server of servers) await server.stop();
    await dbs.dropAll();
  }
}

/** The commit the nodes were built from, and whether the sources differed from it. */
function build(): string {
  const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();
  const changed = git('status', '--porcelain', '--', 'src', 'migrations') !== '';
  return `${git('rev-parse', '--short', 'HEAD')}${changed ? ' with uncommitted changes in src/ or migrations/' : ''}`;
}

function metrics(runs: Partial<Record<Side, SideRun[]>>, quotas: Quotas): Metric[] {
  const present = SIDE_NAMES.filter((side) => runs[side]);
  const sideRuns = (side: Side) => runs[side] ?? [];
  const pick = (side: Side, field: 'rps' | 'p50' | 'p99') => sideRuns(side).map((r) => r[field]);
  const rps = (side: Side) => pick(side, 'rps');
  const ratio = (label: string, a: Side, b: Side, min?: number): Metric[] => (!runs[a] || !runs[b] ? [] : [{
    label,
    unit: '×',
    values: ratios(rps(a), rps(b)),
    ...(min === undefined ? {} : { target: { op: '>=' as const, value: min } }),
  }]);
  const perSide = present.flatMap((side): Metric[] => {
    const { label } = SIDES[side];
    return [
      { label: `${label} PUT`, unit: 'req/s', values: rps(side) },
      { label: `${label} p50`, unit: 'ms', values: pick(side, 'p50') },
      { label: `${label} p99`, unit: 'ms', values: pick(side, 'p99') },
    ];
  });
  // What bound each side: the confined groups' use and throttling, PostgreSQL's and the machine's CPU.
  const binds = present.flatMap((side): Metric[] => {
    const { label, nodes } = SIDES[side];
    return [
      { label: `${label}: nodes' CPU (quota ${(nodes * quotas.node).toFixed(1)})`, unit: 'cores', values: sideRuns(side).map((r) => nodesCores(side, r)) },
      { label: `${label}: nodes throttled`, unit: '% of periods', values: sideRuns(side).map((r) => nodesThrottled(side, r) * 100) },
      { label: `${label}: nodes' CPU per request`, unit: 'ms', values: sideRuns(side).map((r) => nodesMsPerRequest(side, r)) },
      { label: `${label}: requests per group commit`, unit: 'requests', values: sideRuns(side).map(requestsPerGroup) },
      // A PUT is one record: the records a commit holds are its requests.
      { label: `${label}: group commits`, unit: 'commits/s', values: sideRuns(side).map((r) => r.rps / requestsPerGroup(r)) },
      { label: `${label}: groups planned again (a key they read changed)`, unit: '%', values: sideRuns(side).map((r) => conflictShare(r) * 100) },
      ...(SIDES[side].store === 'postgres' ? [{ label: `${label}: PostgreSQL transactions per request`, unit: 'transactions', values: sideRuns(side).map(transactionsPerRequest) }] : []),
      ...(SIDES[side].store === 'postgres' ? [{ label: `${label}: PostgreSQL CPU (primary + standby)`, unit: 'cores', values: sideRuns(side).map(pgCores) }] : []),
      { label: `${label}: load generator CPU (quota ${quotas.load})`, unit: 'cores', values: sideRuns(side).map((r) => r.cpu.cores['load generator']!) },
      { label: `${label}: load generator throttled`, unit: '% of periods', values: sideRuns(side).map((r) => loadThrottled(r) * 100) },
      { label: `${label}: machine busy`, unit: '%', values: sideRuns(side).map((r) => r.cpu.machineBusy * 100) },
    ];
  });
  return [
    ...perSide,
    ...ratio('ratio 2 nodes / 1 node (req/s)', 'pg2', 'pg1', 1.7),
    ...ratio('ratio 4 nodes / 1 node (req/s)', 'pg4', 'pg1', 3),
    ...ratio('ratio PostgreSQL 1 node / SQLite 1 node (req/s)', 'pg1', 'sqlite', 0.8),
    ...ratio(`ratio sync standby / none, ${WRITERS} writers (req/s)`, 'w8sync', 'w8', 0.75),
    ...ratio('with a sync standby: ratio 2 nodes / 1 node (req/s)', 'sync2', 'sync1'),
    ...ratio('with a sync standby: ratio 4 nodes / 1 node (req/s)', 'sync4', 'sync1'),
    ...ratio('ratio sync standby / none, 1 node (req/s)', 'sync1', 'pg1'),
    ...ratio('ratio sync standby / none, 4 nodes (req/s)', 'sync4', 'pg4'),
    ...binds,
  ];
}

/** STATELOG_BENCH_SCALING_SIDES: some of the sides, by name (pg1,pg4), to look into one comparison; all by default. */
function scalingSides(): Side[] {
  const named = process.env.STATELOG_BENCH_SCALING_SIDES?.split(',').map((name) => name.trim()).filter(Boolean);
  if (!named) return SIDE_NAMES;
  const unknown = named.filter((name) => !(SIDE_NAMES as string[]).includes(name));
  if (unknown.length > 0) throw new Error(`STATELOG_BENCH_SCALING_SIDES: no side ${unknown.join(', ')} (sides: ${SIDE_NAMES.join(', ')})`);
  return named as Side[];
}

export const postgresScalingFigure: Figure = {
  name: 'postgres-scaling',
  title: 'PostgreSQL store: 1, 2 and 4 nodes each confined to a CPU quota, with and without a synchronous standby, beside SQLite',
  async run(settings) {
    const quotas = { node: envNumber('STATELOG_BENCH_NODE_CORES', 0.2), load: envNumber('STATELOG_BENCH_LOAD_CORES', 0.8) };
    const connections = envNumber('STATELOG_BENCH_SCALING_CONNECTIONS', 64);
    const sides = scalingSides();
    const perNode = process.env.STATELOG_BENCH_SCALING_PER_NODE === '1';
    const linkDelayMs = envNumber('STATELOG_BENCH_STANDBY_DELAY_MS', 0.5);
    const quotaText = `each node confined to ${quotas.node} core, the load generator to ${quotas.load}`;
    const groups = CpuGroups.create({ ...Object.fromEntries(Array.from({ length: MAX_NODES }, (_, i) => [nodeGroup(i), quotas.node])), [LOAD_GROUP]: quotas.load });
    if (typeof groups === 'string') {
      settings.log(`no scaling figure: ${groups}`);
      return {
        scale: `not measured (${quotaText} was not possible)`,
        settings: { nodeCores: quotas.node, loadCores: quotas.load },
        metrics: [],
        notes: [`Not measured: ${groups}. Without a CPU quota per node the nodes share this machine's cores, and a ratio of node counts would not show scaling.`],
      };
    }
    let cluster: PrivateCluster | undefined;
    let load: LoadProcess | undefined;
    try {
      cluster = await PrivateCluster.start(linkDelayMs);
      const linkRoundTrip = await cluster.linkRoundTripMs();
      load = new LoadProcess();
      groups.place(LOAD_GROUP, load.pid);
      // Twice the suite's: a confined node's rate swings from one 100 ms quota period to the next.
      const seconds = settings.smoke ? settings.seconds : settings.seconds * 2;
      const ctx: Context = { settings, groups, cluster, load, quotas, connections, perNode, seconds };
      const version = await cluster.version();
      const linkText = linkDelayMs > 0 ? `the standby's link holding ${linkDelayMs} ms each way (${linkRoundTrip.toFixed(2)} ms more a round trip, measured)` : 'the standby on loopback';
      settings.log(`private PostgreSQL ${version} primary and synchronous-capable standby at ${cluster.url}, ${linkText}; cgroup v${groups.hierarchy.version}, ${quotaText}`);
      const runs: Partial<Record<Side, SideRun[]>> = await alternate(settings.rounds, sides, (side, round) => measureSide(ctx, side, round));
      const verdicts = sides.map((side) => `${SIDES[side].label}: bound by ${runs[side]!.map((r, i) => `(round ${i + 1}) ${r.bound}`).join('; ')}.`);
      return {
        scale: `${perNode ? `${connections} connections a node` : `${connections} connections in all spread evenly over the nodes`} (${WRITERS} for the writers sides), ${quotaText} (cgroup v${groups.hierarchy.version}); PostgreSQL ${version} unconfined, ${linkText}; ${seconds} s a side a round, ${PUT_KEYS.toLocaleString()} keys, STATELOG_SYNC=full`,
        settings: {
          connections,
          connectionsPerNode: perNode,
          writers: WRITERS,
          writerNodes: WRITER_NODES,
          nodeCores: quotas.node,
          loadCores: quotas.load,
          cgroup: `v${groups.hierarchy.version}`,
          seconds,
          rounds: settings.rounds,
          keys: PUT_KEYS,
          sync: 'full',
          standbyDelayMsEachWay: linkDelayMs,
          standbyAddedRoundTripMs: Number(linkRoundTrip.toFixed(2)),
          build: build(),
          failedRequests: Object.values(runs).flat().reduce((n, r) => n + r!.errors, 0),
        },
        versions: { PostgreSQL: version },
        metrics: metrics(runs, quotas),
        notes: [
          `PostgreSQL is not confined: it stands in for the database machine, and has what the confined groups leave of the ${cpus().length} cores. Its sides without a standby run on the same primary with synchronous_standby_names = '' (the standby still streams, asynchronously).`,
          ...verdicts,
        ],
        details: runs,
      };
    } finally {
      await load?.stop();
      await cluster?.stop();
      try {
        groups.remove();
      } catch (err) {
        console.warn(`  [postgres-scaling] could not remove the CPU groups: ${(err as Error).message}`);
      }
    }
  },
};
