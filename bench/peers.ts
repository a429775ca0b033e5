// Durable PUT of statelog beside its peers on this machine, with one load generator
// and the same client settings: etcd (through its HTTP/JSON gateway, POST /v3/kv/put)
// and NATS KV (JetStream, through the nats client). The sides alternate within one run.
//   npm run bench:peers [-- --connections 50 --seconds 5 --rounds 3]
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type KV, type NatsConnection } from 'nats';
import { Pool } from 'undici';
import { closedLoop, type LoopResult } from './closed-loop.js';
import { flag, freePort, saveResult, startStatelog, summary } from './lib.js';

const KEYS = 10_000;

/** Installs a Debian package when its command is missing (the bench runs as root here). */
function ensureCommand(command: string, debianPackage: string): void {
  if (spawnSync('sh', ['-c', `command -v ${command}`]).status === 0) return;
  console.log(`installing ${debianPackage} with apt-get`);
  spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
  const install = spawnSync('apt-get', ['install', '-y', '-qq', debianPackage], {
    stdio: 'inherit',
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  if (install.status !== 0) throw new Error(`cannot install ${debianPackage}`);
}

async function waitFor(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await check().catch(() => false)) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${what} did not start`);
}

interface Peer {
  name: string;
  fsyncsEachWrite: string;
  put(worker: number, i: number): Promise<void>;
  stop(): Promise<void>;
}

function stopProcess(proc: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (proc.exitCode !== null) return resolve();
    proc.once('exit', () => resolve());
    proc.kill('SIGTERM');
  });
}

const randomKey = () => `user_${Math.floor(Math.random() * KEYS)}`;
const randomValue = () => `{"balance":${Math.floor(Math.random() * 1e6)},"currency":"EUR"}`;

function httpPool(url: string, connections: number): Pool {
  return new Pool(url, { connections, pipelining: 1 });
}

async function statelogPeer(connections: number): Promise<Peer> {
  const server = await startStatelog({ STATELOG_SYNC: 'full' });
  const pool = httpPool(server.url, connections);
  return {
    name: 'statelog',
    fsyncsEachWrite: 'yes: fsync (WAL, synchronous=FULL) before each answer, shared by the writes of one group commit',
    async put() {
      const res = await pool.request({
        method: 'PUT',
        path: `/v1/keys/${randomKey()}`,
        headers: { 'content-type': 'application/json' },
        body: `{"value":${randomValue()}}`,
      });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
    },
    async stop() {
      await pool.close();
      await server.stop();
    },
  };
}

async function etcdPeer(connections: number): Promise<Peer> {
  ensureCommand('etcd', 'etcd-server');
  const [client, peer] = [await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), 'etcd-bench-'));
  const proc = spawn(
    'etcd',
    [
      '--data-dir', dir,
      '--listen-client-urls', `http://127.0.0.1:${client}`,
      '--advertise-client-urls', `http://127.0.0.1:${client}`,
      '--listen-peer-urls', `http://127.0.0.1:${peer}`,
      '--initial-advertise-peer-urls', `http://127.0.0.1:${peer}`,
      '--initial-cluster', `default=http://127.0.0.1:${peer}`,
      '--log-level', 'error',
    ],
    { stdio: 'ignore' },
  );
  const url = `http://127.0.0.1:${client}`;
  await waitFor(async () => (await fetch(`${url}/health`)).ok, 'etcd');
  const pool = httpPool(url, connections);
  const b64 = (text: string) => Buffer.from(text).toString('base64');
  return {
    name: 'etcd',
    fsyncsEachWrite: 'yes: the raft WAL is fsynced before a put is answered (batched across concurrent puts)',
    async put() {
      const res = await pool.request({
        method: 'POST',
        path: '/v3/kv/put',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ key: b64(randomKey()), value: b64(randomValue()) }),
      });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
    },
    async stop() {
      await pool.close();
      await stopProcess(proc);
    },
  };
}

async function natsPeer(): Promise<Peer> {
  ensureCommand('nats-server', 'nats-server');
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'nats-bench-'));
  const proc = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], { stdio: 'ignore' });
  let nc: NatsConnection | undefined;
  await waitFor(async () => {
    nc = await connect({ servers: `127.0.0.1:${port}` });
    return true;
  }, 'nats-server');
  const kv: KV = await nc!.jetstream().views.kv('bench', { history: 1 });
  const encoder = new TextEncoder();
  return {
    name: 'NATS KV',
    fsyncsEachWrite: 'no: JetStream acknowledges once written to its file store; it fsyncs periodically, not per write',
    async put() {
      await kv.put(randomKey(), encoder.encode(randomValue()));
    },
    async stop() {
      await nc!.close();
      await stopProcess(proc);
    },
  };
}

export async function runPeers(options: { connections: number; seconds: number; rounds: number }) {
  const peers = [await statelogPeer(options.connections), await etcdPeer(options.connections), await natsPeer()];
  const runs: Record<string, LoopResult[]> = Object.fromEntries(peers.map((p) => [p.name, []]));
  try {
    for (const peer of peers) await closedLoop(options.connections, 1, peer.put); // warm-up
    for (let round = 0; round < options.rounds; round++) {
      // Rotate the order each round, so drift in the machine's load hits every side.
      const order = peers.map((_, i) => peers[(i + round) % peers.length]!);
      for (const peer of order) {
        const result = await closedLoop(options.connections, options.seconds, peer.put);
        runs[peer.name]!.push(result);
        console.log(`round ${round + 1}: ${peer.name} ${result.rps.toFixed(0)} put/s, p99 ${result.p99.toFixed(1)} ms`);
      }
    }
  } finally {
    for (const peer of peers) await peer.stop();
  }
  const ratioToEtcd = runs.statelog!.map((r, i) => r.rps / runs.etcd![i]!.rps);
  return {
    settings: options,
    systems: peers.map((peer) => ({
      name: peer.name,
      fsyncsEachWrite: peer.fsyncsEachWrite,
      rps: summary(runs[peer.name]!.map((r) => r.rps)),
      p50: summary(runs[peer.name]!.map((r) => r.p50)),
      p99: summary(runs[peer.name]!.map((r) => r.p99)),
      errors: runs[peer.name]!.reduce((n, r) => n + r.errors, 0),
    })),
    statelogToEtcd: summary(ratioToEtcd),
    target: 'statelog durable PUT >= 3x etcd',
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const result = await runPeers({ connections: flag('connections', 50), seconds: flag('seconds', 5), rounds: flag('rounds', 3) });
  for (const system of result.systems) {
    console.log(`${system.name}: ${system.rps.median.toFixed(0)} put/s, p50 ${system.p50.median.toFixed(1)} ms, p99 ${system.p99.median.toFixed(1)} ms (fsync each write: ${system.fsyncsEachWrite})`);
  }
  console.log(`statelog / etcd: ${result.statelogToEtcd.median.toFixed(2)}`);
  console.log(`written to ${saveResult('peers', result)}`);
}
