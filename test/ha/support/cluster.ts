// The `ha` topology of docker-compose.yml as real processes on 127.0.0.1, from the same
// files (deploy/ha): one etcd, three Patroni members (each a PostgreSQL 15 data directory
// of its own, run as the `postgres` OS user) and HAProxy sending connections to the
// primary. The compose file sets the same Patroni and HAProxy variables (MEMBER_ENV,
// HAPROXY_ENV; test/ha/compose.test.ts compares them).
import { spawnSync } from 'node:child_process';
import { chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { freePort, ROOT } from '../../../harness/server-process.js';
import { killAll, postmasterPid, processesMentioning, spawnLogged, tail, withDescendants, type Spawned } from './processes.js';

export const DEPLOY = resolve(ROOT, 'deploy/ha');
const PG_BIN = '/usr/lib/postgresql/15/bin';
const BINARIES = { patroni: '/usr/bin/patroni', etcd: '/usr/bin/etcd', haproxy: '/usr/sbin/haproxy', postgres: `${PG_BIN}/postgres`, psql: '/usr/bin/psql' };
export const MEMBER_NAMES = ['pg1', 'pg2', 'pg3'] as const;
export type MemberName = (typeof MEMBER_NAMES)[number];
const PASSWORDS = { superuser: 'ha-superuser', replication: 'ha-replication', statelog: 'ha-statelog', restapi: 'ha-restapi' };

/** Patroni's environment for one member: what deploy/ha/patroni.yml leaves to each member. */
export const MEMBER_ENV = [
  'PATRONI_NAME',
  'PATRONI_RESTAPI_LISTEN',
  'PATRONI_RESTAPI_CONNECT_ADDRESS',
  'PATRONI_RESTAPI_USERNAME',
  'PATRONI_RESTAPI_PASSWORD',
  'PATRONI_POSTGRESQL_LISTEN',
  'PATRONI_POSTGRESQL_CONNECT_ADDRESS',
  'PATRONI_POSTGRESQL_DATA_DIR',
  'PATRONI_POSTGRESQL_PGPASS',
  'PATRONI_ETCD3_HOSTS',
  'PATRONI_SUPERUSER_PASSWORD',
  'PATRONI_REPLICATION_PASSWORD',
  'STATELOG_PG_PASSWORD',
] as const;
/** HAProxy's environment: the variables deploy/ha/haproxy.cfg expands. */
export const HAPROXY_ENV = ['HA_PG_BIND', 'HA_PG1_ADDR', 'HA_PG2_ADDR', 'HA_PG3_ADDR', 'HA_PG1_API_PORT', 'HA_PG2_API_PORT', 'HA_PG3_API_PORT'] as const;

/** etcd's flags, as the compose file's etcd service runs it: a single member named etcd. */
export function etcdArgs(at: { dataDir: string; listenClient: string; advertiseClient: string; listenPeer: string; advertisePeer: string }): string[] {
  return [
    '--name=etcd',
    `--data-dir=${at.dataDir}`,
    `--listen-client-urls=${at.listenClient}`,
    `--advertise-client-urls=${at.advertiseClient}`,
    `--listen-peer-urls=${at.listenPeer}`,
    `--initial-advertise-peer-urls=${at.advertisePeer}`,
    `--initial-cluster=etcd=${at.advertisePeer}`,
  ];
}

export interface MemberStatus {
  name: string;
  /** leader, sync_standby or replica. */
  role: string;
  /** running, streaming, starting, stopped, crashed... as Patroni says. */
  state: string;
  /** Bytes of WAL behind the leader; 'unknown' when Patroni cannot tell. */
  lag: number | string | undefined;
  timeline: number | undefined;
}

interface Member {
  name: MemberName;
  dir: string;
  dataDir: string;
  pgPort: number;
  apiPort: number;
  env: Record<(typeof MEMBER_ENV)[number], string>;
  patroni?: Spawned;
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** Polls `predicate` until it returns a truthy value (an exception counts as not yet). */
export async function waitFor<T>(predicate: () => T | Promise<T>, timeoutMs: number, what = 'condition'): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value as NonNullable<T>;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await sleep(100);
  }
}

/** A started cluster, or its logs printed and the error thrown (a test file's beforeAll). */
export async function startCluster(options: { strict?: boolean } = {}): Promise<HaCluster> {
  const reason = HaCluster.available();
  if (reason) throw new Error(reason);
  const cluster = new HaCluster();
  try {
    await cluster.start(options);
  } catch (error) {
    console.error(cluster.logs());
    await cluster.stop();
    throw error;
  }
  return cluster;
}

export class HaCluster {
  readonly dir = mkdtempSync(join(tmpdir(), 'statelog-ha-'));
  private readonly machines = new Map<MemberName, Member>();
  private etcd?: Spawned;
  private haproxy?: Spawned;
  private haproxyPort = 0;
  private etcdPort = 0;
  private uid = 0;
  private gid = 0;

  /** null when everything the cluster runs is installed; else why not, in one line. */
  static available(): string | null {
    const missing = Object.entries(BINARIES).filter(([, path]) => !existsSync(path));
    if (missing.length > 0) return `missing ${missing.map(([name, path]) => `${name} (${path})`).join(', ')}: apt-get install patroni etcd-server haproxy postgresql-15`;
    if (process.getuid?.() !== 0) return 'the harness runs PostgreSQL as the postgres OS user: it must be started as root';
    if (spawnSync('id', ['-u', 'postgres']).status !== 0) return 'no postgres OS user';
    return null;
  }

  /** URL of the `statelog` database through HAProxy (the primary, whichever it is). */
  get url(): string {
    return `postgres://statelog:${PASSWORDS.statelog}@127.0.0.1:${this.haproxyPort}/statelog`;
  }

  /** URL of the `statelog` database on one member, bypassing HAProxy (a standby, say). */
  directUrl(name: MemberName): string {
    return `postgres://statelog:${PASSWORDS.statelog}@127.0.0.1:${this.member(name).pgPort}/statelog`;
  }

  /** Bootstraps the cluster; resolves once a leader and a synchronous standby exist and HAProxy reaches the primary. */
  async start(options: { strict?: boolean; timeoutMs?: number } = {}): Promise<{ url: string }> {
    const timeoutMs = options.timeoutMs ?? 90_000;
    this.uid = Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout.trim());
    this.gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout.trim());
    mkdirSync(join(this.dir, 'bin'));
    // Copies readable by the postgres user, whatever the checkout's permissions.
    for (const file of ['patroni.yml', 'haproxy.cfg']) copyFileSync(join(DEPLOY, file), join(this.dir, file));
    copyFileSync(join(DEPLOY, 'statelog-post-bootstrap'), join(this.dir, 'bin', 'statelog-post-bootstrap'));
    for (const path of [this.dir, join(this.dir, 'bin'), join(this.dir, 'patroni.yml'), join(this.dir, 'bin', 'statelog-post-bootstrap')]) chownSync(path, this.uid, this.gid);

    this.etcdPort = await freePort();
    const peerPort = await freePort();
    const etcdUrl = `http://127.0.0.1:${this.etcdPort}`;
    this.etcd = spawnLogged(
      BINARIES.etcd,
      etcdArgs({ dataDir: join(this.dir, 'etcd'), listenClient: etcdUrl, advertiseClient: etcdUrl, listenPeer: `http://127.0.0.1:${peerPort}`, advertisePeer: `http://127.0.0.1:${peerPort}` }),
      join(this.dir, 'etcd.log'),
    );
    await waitFor(() => fetch(`${etcdUrl}/health`).then((res) => res.ok), 20_000, 'etcd');

    for (const name of MEMBER_NAMES) {
      const dir = join(this.dir, name);
      mkdirSync(dir);
      chownSync(dir, this.uid, this.gid);
      const pgPort = await freePort();
      const apiPort = await freePort();
      const dataDir = join(dir, 'data');
      this.machines.set(name, {
        name,
        dir,
        dataDir,
        pgPort,
        apiPort,
        env: {
          PATRONI_NAME: name,
          PATRONI_RESTAPI_LISTEN: `127.0.0.1:${apiPort}`,
          PATRONI_RESTAPI_CONNECT_ADDRESS: `127.0.0.1:${apiPort}`,
          PATRONI_RESTAPI_USERNAME: 'patroni',
          PATRONI_RESTAPI_PASSWORD: PASSWORDS.restapi,
          PATRONI_POSTGRESQL_LISTEN: `127.0.0.1:${pgPort}`,
          PATRONI_POSTGRESQL_CONNECT_ADDRESS: `127.0.0.1:${pgPort}`,
          PATRONI_POSTGRESQL_DATA_DIR: dataDir,
          PATRONI_POSTGRESQL_PGPASS: join(dir, 'pgpass'),
          PATRONI_ETCD3_HOSTS: `127.0.0.1:${this.etcdPort}`,
          PATRONI_SUPERUSER_PASSWORD: PASSWORDS.superuser,
          PATRONI_REPLICATION_PASSWORD: PASSWORDS.replication,
          STATELOG_PG_PASSWORD: PASSWORDS.statelog,
        },
      });
    }
    for (const name of MEMBER_NAMES) this.startMachine(name);

    this.haproxyPort = await freePort();
    const [pg1, pg2, pg3] = [this.member('pg1'), this.member('pg2'), this.member('pg3')];
    const haproxyEnv: Record<(typeof HAPROXY_ENV)[number], string> = {
      HA_PG_BIND: `127.0.0.1:${this.haproxyPort}`,
      HA_PG1_ADDR: `127.0.0.1:${pg1.pgPort}`,
      HA_PG2_ADDR: `127.0.0.1:${pg2.pgPort}`,
      HA_PG3_ADDR: `127.0.0.1:${pg3.pgPort}`,
      HA_PG1_API_PORT: String(pg1.apiPort),
      HA_PG2_API_PORT: String(pg2.apiPort),
      HA_PG3_API_PORT: String(pg3.apiPort),
    };
    // -db: foreground, as in the container. -W: master-worker mode, also as in the official image.
    this.haproxy = spawnLogged(BINARIES.haproxy, ['-W', '-db', '-f', join(this.dir, 'haproxy.cfg')], join(this.dir, 'haproxy.log'), {
      env: { PATH: process.env.PATH, ...haproxyEnv },
    });

    await waitFor(async () => {
      const members = await this.status();
      return members.some((m) => m.role === 'leader' && m.state === 'running') && members.some((m) => m.role === 'sync_standby' && ['running', 'streaming'].includes(m.state));
    }, timeoutMs, 'a leader and a synchronous standby');
    if (options.strict) await this.setConfig({ synchronous_mode_strict: true });
    // A table of the harness's own (apart from statelog's), for waitForWritable's probes.
    await waitFor(
      () => this.viaProxy('CREATE SCHEMA IF NOT EXISTS harness; CREATE TABLE IF NOT EXISTS harness.probe (at timestamptz NOT NULL DEFAULT now())').then(() => true),
      30_000,
      'HAProxy to reach the primary',
    );
    return { url: this.url };
  }

  private member(name: MemberName): Member {
    const member = this.machines.get(name);
    if (!member) throw new Error(`no member ${name}`);
    return member;
  }

  /** Starts the member's Patroni (which starts its PostgreSQL), as the `postgres` OS user. */
  private startMachine(name: MemberName): void {
    const member = this.member(name);
    if (member.patroni && member.patroni.proc.exitCode === null && member.patroni.proc.signalCode === null) throw new Error(`${name} already runs`);
    member.patroni = spawnLogged(BINARIES.patroni, [join(this.dir, 'patroni.yml')], join(member.dir, 'patroni.log'), {
      uid: this.uid,
      gid: this.gid,
      cwd: member.dir,
      env: { PATH: `${join(this.dir, 'bin')}:/usr/bin:/bin`, HOME: member.dir, LANG: 'C.UTF-8', ...member.env },
    });
  }

  private apiUrl(name: MemberName): string {
    return `http://127.0.0.1:${this.member(name).apiPort}`;
  }

  private async api(name: MemberName, method: string, path: string, body?: unknown): Promise<Response> {
    return fetch(`${this.apiUrl(name)}${path}`, {
      method,
      headers: { authorization: `Basic ${Buffer.from(`patroni:${PASSWORDS.restapi}`).toString('base64')}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(method === 'GET' ? 1000 : 30_000),
    });
  }

  /** The cluster as the first member that answers sees it (Patroni's GET /cluster). */
  private async status(): Promise<MemberStatus[]> {
    let last: unknown = new Error('no member answers');
    for (const name of MEMBER_NAMES) {
      try {
        const res = await this.api(name, 'GET', '/cluster');
        if (!res.ok) continue;
        const body = (await res.json()) as { members: MemberStatus[] };
        return body.members.map(({ name, role, state, lag, timeline }) => ({ name, role, state, lag, timeline }));
      } catch (error) {
        last = error;
      }
    }
    throw last;
  }

  /** Every member Patroni knows of (a vanished one drops out once its key expires). */
  members(): Promise<MemberStatus[]> {
    return this.status();
  }

  /** The leader's name, or null while there is none. */
  async leader(): Promise<MemberName | null> {
    return ((await this.status()).find((m) => m.role === 'leader')?.name as MemberName | undefined) ?? null;
  }

  async syncStandby(): Promise<MemberName | null> {
    return ((await this.status()).find((m) => m.role === 'sync_standby')?.name as MemberName | undefined) ?? null;
  }

  /** Changes Patroni's dynamic configuration (PATCH /config) and waits until every running member applied it. */
  async setConfig(change: Record<string, unknown>): Promise<void> {
    // Any running member writes it to etcd; the leader first, as patronictl does (a lost
    // leader is still listed until its key expires).
    const leader = await this.leader();
    const name = [leader, ...MEMBER_NAMES].find((member): member is MemberName => member !== null && this.runs(member));
    if (!name) throw new Error('PATCH /config: no member runs');
    const res = await this.api(name, 'PATCH', '/config', change);
    if (!res.ok) throw new Error(`PATCH /config: ${res.status} ${await res.text()}`);
    await waitFor(async () => {
      const config = (await (await this.api(name, 'GET', '/config')).json()) as Record<string, unknown>;
      return Object.entries(change).every(([key, value]) => JSON.stringify(config[key]) === JSON.stringify(value));
    }, 10_000, 'the configuration change');
    // Members read the dynamic configuration on their next loop (loop_wait).
    await sleep(2000);
  }

  /** kill -9 of the member's postmaster alone: Patroni restarts it, or fails over. */
  async killPostmaster(name: MemberName): Promise<void> {
    const pid = postmasterPid(this.member(name).dataDir);
    if (pid === null) throw new Error(`${name}: no postmaster running`);
    await killAll([pid]);
  }

  /** kill -9 of the member's Patroni, its PostgreSQL and everything they started, at once: the machine vanished. */
  async killMachine(name: MemberName): Promise<void> {
    const member = this.member(name);
    const roots = [member.patroni?.proc.pid, postmasterPid(member.dataDir), ...processesMentioning(member.dataDir)].filter((pid): pid is number => typeof pid === 'number');
    // Frozen first, all of them, then killed: a machine vanishes at once. Killed one by one,
    // backends outlive the postmaster for a moment, and a commit whose standby wait its death
    // ended is visible to them (the postmaster scenario covers that case).
    const pids = withDescendants(roots);
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGSTOP');
      } catch {
        // Already gone.
      }
    }
    await killAll(pids);
    await member.patroni?.exited;
  }

  /** Starts a member again after killMachine or stop (it rejoins, rewound or copied again if it diverged). */
  async restartMachine(name: MemberName): Promise<void> {
    this.startMachine(name);
  }

  /** A clean stop: Patroni stops PostgreSQL and leaves the cluster (a leader hands over first). */
  async stopMember(name: MemberName): Promise<void> {
    const member = this.member(name);
    member.patroni?.proc.kill('SIGTERM');
    await Promise.race([member.patroni?.exited, sleep(30_000)]);
    if (member.patroni?.proc.exitCode === null) throw new Error(`${name}: Patroni did not stop within 30 s`);
  }

  startMember(name: MemberName): Promise<void> {
    return this.restartMachine(name);
  }

  /**
   * The standbys of the moment, stopped cleanly, the synchronous one last; returns their names for
   * startStandbys. Stopped together, the leaving synchronous standby's release could name the other
   * one, already on its way out, as the next: a name Patroni (3.0) then never clears.
   */
  async stopStandbys(): Promise<MemberName[]> {
    const leader = await this.leader();
    const sync = await this.syncStandby();
    const standbys = MEMBER_NAMES.filter((name) => name !== leader && this.runs(name)).sort((a, b) => Number(a === sync) - Number(b === sync));
    for (const name of standbys) await this.stopMember(name);
    return standbys;
  }

  async startStandbys(names: MemberName[]): Promise<void> {
    for (const name of names) this.startMachine(name);
  }

  /** Whether the member's Patroni process runs. */
  runs(name: MemberName): boolean {
    const patroni = this.member(name).patroni;
    return patroni !== undefined && patroni.proc.exitCode === null && patroni.proc.signalCode === null;
  }

  /** A planned switchover (POST /switchover on the leader); resolves when Patroni reports it done. */
  async switchover(candidate?: MemberName): Promise<MemberName> {
    const leader = await this.leader();
    if (!leader) throw new Error('switchover: no leader');
    const target = candidate ?? (await this.syncStandby());
    if (!target) throw new Error('switchover: no synchronous standby');
    const res = await this.api(leader, 'POST', '/switchover', { leader, candidate: target });
    if (!res.ok) throw new Error(`switchover: ${res.status} ${await res.text()}`);
    return target;
  }

  /** A forced failover to `candidate` (POST /failover), even one that is not the synchronous standby. */
  async failover(candidate: MemberName): Promise<void> {
    const leader = await this.leader();
    const via = leader !== null && this.runs(leader) ? leader : candidate;
    const res = await this.api(via, 'POST', '/failover', { candidate });
    if (!res.ok) throw new Error(`failover: ${res.status} ${await res.text()}`);
  }

  /** A query straight to one member's PostgreSQL (not through HAProxy), as the superuser. */
  async sql<R extends pg.QueryResultRow = Record<string, unknown>>(name: MemberName, text: string, values: unknown[] = [], database = 'statelog'): Promise<R[]> {
    const client = new pg.Client({
      host: '127.0.0.1',
      port: this.member(name).pgPort,
      user: 'postgres',
      password: PASSWORDS.superuser,
      database,
      connectionTimeoutMillis: 2000,
      query_timeout: 10_000,
    });
    client.on('error', () => {});
    await client.connect();
    try {
      return (await client.query<R>(text, values)).rows;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /** One statement through HAProxy on a fresh connection, as statelog's role. */
  async viaProxy<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, values: unknown[] = [], connectMs = 2000, queryMs = 10_000): Promise<R[]> {
    const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: connectMs, query_timeout: queryMs });
    client.on('error', () => {});
    await client.connect();
    try {
      return (await client.query<R>(text, values)).rows;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /**
   * Waits until a write through HAProxy commits (on a primary, acknowledged by its
   * synchronous standby); returns the milliseconds waited. Each attempt connects anew; one
   * that reaches a primary waits for its commit rather than giving up after a second, so the
   * time measured ends when the write is acknowledged.
   */
  async waitForWritable(timeoutMs: number): Promise<number> {
    const started = Date.now();
    await waitFor(async () => {
      await this.viaProxy('INSERT INTO harness.probe DEFAULT VALUES', [], 1000, Math.max(1000, started + timeoutMs - Date.now()));
      return true;
    }, timeoutMs, 'a write through HAProxy');
    return Date.now() - started;
  }

  /** The member HAProxy sends connections to now (by its port). */
  async routedTo(): Promise<MemberName> {
    const [row] = await this.viaProxy<{ port: number }>('SELECT inet_server_port() AS port');
    const member = [...this.machines.values()].find((m) => m.pgPort === row!.port);
    if (!member) throw new Error(`HAProxy routes to an unknown port ${row!.port}`);
    return member.name;
  }

  /** The tail of every log (Patroni's and PostgreSQL's of each member, etcd's, HAProxy's). */
  logs(lines = 40): string {
    const files = [join(this.dir, 'etcd.log'), join(this.dir, 'haproxy.log'), ...MEMBER_NAMES.map((name) => join(this.dir, name, 'patroni.log'))];
    for (const name of MEMBER_NAMES) {
      const logDir = join(this.member(name).dataDir, 'log');
      if (existsSync(logDir)) files.push(...readdirSync(logDir).map((file) => join(logDir, file)));
    }
    return files.map((file) => `--- ${file}\n${tail(file, lines)}`).join('\n');
  }

  /** Kills everything this cluster started (whatever state it is in) and removes its directory. */
  async stop(): Promise<void> {
    const roots = [
      ...[...this.machines.values()].flatMap((m) => [m.patroni?.proc.pid, postmasterPid(m.dataDir)]),
      this.haproxy?.proc.pid,
      this.etcd?.proc.pid,
      ...processesMentioning(this.dir),
    ].filter((pid): pid is number => typeof pid === 'number');
    await killAll(withDescendants(roots));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
