// Durable PUT of statelog beside its peers on this machine: etcd (through its HTTP/JSON
// gateway, POST /v3/kv/put) driven by the same load generator as statelog
// (bench/shared/load.ts, autocannon), NATS KV (JetStream, through the nats client in a closed
// loop: it speaks no HTTP), and a bare fastify route that stores nothing as the
// machine's ceiling. The sides rotate within each round.
// etcd and nats-server are installed with apt-get when missing.
//   npm run bench -- --only peers
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from 'nats';
import { closedLoop, type HttpRequest, type LoopResult } from '../shared/closed-loop.js';
import { alternate, ratios, type Figure, type SystemResult } from '../shared/figure.js';
import { freePort, sleep, startBare, startStatelog } from '../shared/lib.js';
import { load, prebuilt } from '../shared/load.js';
import { putRequest, PUT_KEYS, randomKey, randomValue } from '../writes/write.js';

/** Installs a Debian package when its command is missing (the bench runs as root here). */
export function ensureCommand(command: string, debianPackage: string): void {
  if (spawnSync('sh', ['-c', `command -v ${command}`]).status === 0) return;
  console.log(`installing ${debianPackage} with apt-get`);
  spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
  const install = spawnSync('apt-get', ['install', '-y', '-qq', debianPackage], {
    stdio: 'inherit',
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  if (install.status !== 0) throw new Error(`cannot install ${debianPackage}`);
}

/** The first line of `command --version`. */
export function versionOf(command: string): string {
  const out = spawnSync(command, ['--version'], { encoding: 'utf8' });
  return (out.stdout || out.stderr || 'unknown').split('\n')[0]!.trim();
}

async function waitFor(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await check().catch(() => false)) return;
    await sleep(50);
  }
  throw new Error(`${what} did not start`);
}

interface Peer {
  name: string;
  fsync: string;
  /** `connections` concurrent puts for `seconds`. */
  run(seconds: number): Promise<LoopResult>;
  stop(): Promise<void>;
}

/** A peer that speaks HTTP: the suite's generator on pre-built requests. */
const httpRun = (url: string, connections: number, requests: HttpRequest[]) => (seconds: number) => load({ url, connections, seconds, requests });

function stopProcess(proc: ChildProcess, dir: string): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      rmSync(dir, { recursive: true, force: true });
      resolve();
    };
    if (proc.exitCode !== null || proc.signalCode !== null) return done();
    proc.once('exit', done);
    proc.kill('SIGTERM');
  });
}

async function statelogPeer(connections: number, sync: 'full' | 'normal'): Promise<Peer> {
  const server = await startStatelog({ STATELOG_SYNC: sync });
  return {
    name: sync === 'full' ? 'statelog' : 'statelog (SYNC=normal)',
    fsync:
      sync === 'full'
        ? 'yes: the SQLite WAL is fdatasynced before each answer (on the event loop while the disk is fast); one fsync serves every write committed since the last'
        : 'no: STATELOG_SYNC=normal writes the WAL before answering but fsyncs only at checkpoints (survives a process crash, not a power loss), shown for a like-for-like look at NATS',
    run: httpRun(server.url, connections, prebuilt(putRequest)),
    stop: () => server.stop(),
  };
}

/**
 * Not a peer but the ceiling of this machine: the same PUT parsed and validated by a
 * fastify route that stores nothing, under the same load generator.
 */
async function barePeer(connections: number): Promise<Peer> {
  const server = await startBare();
  return {
    name: 'bare fastify',
    fsync: 'no: stores nothing; the ceiling of an HTTP service on this machine and load generator',
    run: httpRun(server.url, connections, prebuilt(putRequest)),
    stop: () => server.stop(),
  };
}

async function etcdPeer(connections: number): Promise<Peer> {
  const [client, peer] = [await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), 'etcd-bench-'));
  // prettier-ignore
  const proc = spawn('etcd', [
    '--data-dir', dir,
    '--listen-client-urls', `http://127.0.0.1:${client}`,
    '--advertise-client-urls', `http://127.0.0.1:${client}`,
    '--listen-peer-urls', `http://127.0.0.1:${peer}`,
    '--initial-advertise-peer-urls', `http://127.0.0.1:${peer}`,
    '--initial-cluster', `default=http://127.0.0.1:${peer}`,
    '--log-level', 'error',
  ], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${client}`;
  await waitFor(async () => (await fetch(`${url}/health`)).ok, 'etcd');
  const b64 = (text: string) => Buffer.from(text).toString('base64');
  // The gateway's JSON form of a put: key and value base64-encoded, the same keys and values as statelog's.
  const put = (): HttpRequest => ({ method: 'POST', path: '/v3/kv/put', body: JSON.stringify({ key: b64(randomKey()), value: b64(randomValue()) }) });
  return {
    name: 'etcd',
    fsync: 'yes: the raft WAL is fsynced before a put is answered (one fsync serves the puts of one raft batch)',
    run: httpRun(url, connections, prebuilt(put)),
    stop: () => stopProcess(proc, dir),
  };
}

async function natsPeer(connections: number): Promise<Peer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'nats-bench-'));
  const proc = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], { stdio: 'ignore' });
  let nc: NatsConnection | undefined;
  await waitFor(async () => {
    nc = await connect({ servers: `127.0.0.1:${port}` });
    return true;
  }, 'nats-server');
  const kv = await nc!.jetstream().views.kv('bench', { history: 1 });
  const encoder = new TextEncoder();
  return {
    name: 'NATS KV',
    fsync:
      'no: JetStream acknowledges once the write is in its file store (the OS page cache) and fsyncs every 2 minutes; nats-server 2.9 has no setting to fsync each write (sync_interval: always came in 2.10)',
    run: (seconds) => closedLoop(connections, seconds, async () => void (await kv.put(randomKey(), encoder.encode(randomValue())))),
    async stop() {
      await nc!.close();
      await stopProcess(proc, dir);
    },
  };
}

export const peersFigure: Figure = {
  name: 'peers',
  title: 'Peers on this machine: statelog, etcd and NATS KV, PUT c = 50',
  async run(settings) {
    const connections = 50;
    ensureCommand('etcd', 'etcd-server');
    ensureCommand('nats-server', 'nats-server');
    const peers: Peer[] = [];
    let runs: Record<string, LoopResult[]>;
    try {
      peers.push(
        await statelogPeer(connections, 'full'),
        await etcdPeer(connections),
        await natsPeer(connections),
        await statelogPeer(connections, 'normal'),
        await barePeer(connections),
      );
      for (const peer of peers) await peer.run(settings.warmupSeconds);
      runs = await alternate(settings.rounds, peers.map((p) => p.name), async (name, round) => {
        const result = await peers.find((p) => p.name === name)!.run(settings.seconds);
        settings.log(`round ${round + 1}: ${name} ${result.rps.toFixed(0)} put/s, p99 ${result.p99.toFixed(1)} ms`);
        return result;
      });
    } finally {
      for (const peer of peers) await peer.stop();
    }
    const systems: SystemResult[] = peers.map((peer) => ({
      name: peer.name,
      fsync: peer.fsync,
      rps: runs[peer.name]!.map((r) => r.rps),
      p50: runs[peer.name]!.map((r) => r.p50),
      p99: runs[peer.name]!.map((r) => r.p99),
      errors: runs[peer.name]!.reduce((n, r) => n + r.errors, 0),
    }));
    const rps = (name: string) => runs[name]!.map((r) => r.rps);
    const p99 = (name: string) => runs[name]!.map((r) => r.p99);
    return {
      scale: `${connections} concurrent puts of a small object to random keys of ${PUT_KEYS.toLocaleString()}, ${settings.seconds} s a system a round, data in a temp dir`,
      settings: { connections, seconds: settings.seconds, rounds: settings.rounds, keys: PUT_KEYS, generator: 'bench/shared/load.ts (autocannon, keep-alive) for the HTTP systems; bench/shared/closed-loop.ts with the nats client for NATS' },
      versions: { etcd: versionOf('etcd'), 'nats-server': versionOf('nats-server') },
      systems,
      notes: [
        'How etcd is driven: one member, `etcd --data-dir <temp dir> --listen-client-urls http://127.0.0.1:PORT ' +
          '--advertise-client-urls … --listen-peer-urls … --initial-cluster default=… --log-level error`, its defaults ' +
          'otherwise (so its raft WAL is fsynced before a put is answered; `--unsafe-no-fsync` is not given). Each put is ' +
          '`POST /v3/kv/put` to its gRPC JSON gateway with body `{"key":"<base64>","value":"<base64>"}`, the same random ' +
          `keys (of ${PUT_KEYS.toLocaleString()}) and small JSON values as statelog's PUT, sent by the same generator ` +
          '(bench/shared/load.ts) with the same 50 connections, taking turns with the other systems in every round.',
      ],
      metrics: [
        ...systems.map((s) => ({ label: `${s.name} put`, unit: 'req/s', values: s.rps })),
        ...systems.map((s) => ({ label: `${s.name} p99`, unit: 'ms', values: s.p99 })),
        { label: 'ratio statelog / etcd (req/s)', unit: '×', values: ratios(rps('statelog'), rps('etcd')), target: { op: '>=', value: 3 } },
        { label: 'ratio statelog / etcd (p99)', unit: '×', values: ratios(p99('statelog'), p99('etcd')) },
        { label: 'ratio statelog / NATS KV (req/s)', unit: '×', values: ratios(rps('statelog'), rps('NATS KV')) },
        // What the 3 × target asks of the HTTP layer alone: above 1 it is out of reach here.
        { label: 'ratio statelog / bare fastify (req/s)', unit: '×', values: ratios(rps('statelog'), rps('bare fastify')) },
        { label: 'ratio 3 × etcd / bare fastify (req/s)', unit: '×', values: ratios(rps('etcd').map((r) => 3 * r), rps('bare fastify')) },
      ],
    };
  },
};
