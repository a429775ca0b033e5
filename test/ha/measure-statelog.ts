// statelog on the replicated cluster of test/ha/support/cluster.ts (Patroni, synchronous
// standby, HAProxy), against statelog on one PostgreSQL and on SQLite:
// 1. durable PUTs per second, closed loop of `connections` workers: one SQLite node; one node
//    on a single PostgreSQL (127.0.0.1:5432, a database made for the run); one and two
//    nodes on the cluster. Sides rotate each round; medians printed.
// 2. the write pause statelog's clients see (the longest time without an acknowledged PUT,
//    writers retrying at once through both nodes) when the leader's machine is lost and in a
//    planned switchover, `failovers` times each; for the machine loss also how long after
//    HAProxy first routed to the new primary the first write was acknowledged.
//   flock /tmp/statelog-heavy.lock npx tsx test/ha/measure-statelog.ts [rounds] [failovers]
import pg from 'pg';
import { closedLoop, HttpClient } from '../../bench/shared/closed-loop.js';
import { putRequest } from '../../bench/writes/write.js';
import { startServer, type ListeningServer } from '../../harness/server-process.js';
import { buildServer, SERVER_ENTRY } from '../../harness/build.js';
import { HaCluster, startCluster, waitFor, type MemberName } from './support/cluster.js';

const rounds = Number(process.argv[2] ?? 3);
const failovers = Number(process.argv[3] ?? 5);
const connections = 16;
const seconds = 8;
const LOCAL_PG = process.env.STATELOG_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const QUIET = { LOG_LEVEL: 'warn', STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' };

function node(env: Record<string, string>): Promise<ListeningServer> {
  return startServer({ entry: SERVER_ENTRY, env: { ...QUIET, ...env }, output: 'quiet', timeoutMs: 30_000 });
}

const pgNode = (url: string) => node({ STATELOG_STORE: 'postgres', DATABASE_URL: url, STATELOG_PG_POOL_SIZE: '8' });

async function throughput(cluster: HaCluster): Promise<void> {
  const admin = new pg.Client(LOCAL_PG);
  await admin.connect();
  const database = `statelog_ha_measure_${process.pid}`;
  await admin.query(`CREATE DATABASE ${database} TEMPLATE template0 ENCODING 'UTF8'`);
  const single = new URL(LOCAL_PG);
  single.pathname = `/${database}`;
  const servers: ListeningServer[] = [];
  const clients: HttpClient[] = [];
  try {
    const sqlite = await node({ STATELOG_DB: `/tmp/statelog-ha-measure-${process.pid}.db` });
    const onePg = await pgNode(single.toString());
    const ha1 = await pgNode(cluster.url);
    const ha2 = await pgNode(cluster.url);
    servers.push(sqlite, onePg, ha1, ha2);
    const client = (server: ListeningServer) => {
      const made = new HttpClient(server.url, connections);
      clients.push(made);
      return made;
    };
    const sides = {
      'SQLite, 1 node': [client(sqlite)],
      'one PostgreSQL, 1 node': [client(onePg)],
      'replicated cluster, 1 node': [client(ha1)],
      'replicated cluster, 2 nodes': [client(ha1), client(ha2)],
    };
    const load = (targets: HttpClient[], s: number) => closedLoop(connections, s, async (w) => void (await targets[w % targets.length]!.expectOk(putRequest())));
    for (const targets of Object.values(sides)) await load(targets, 2);
    const rates = new Map<string, number[]>(Object.keys(sides).map((name) => [name, []]));
    for (let round = 0; round < rounds; round++) {
      const names = Object.keys(sides);
      for (let i = 0; i < names.length; i++) {
        const name = names[(i + round) % names.length]! as keyof typeof sides;
        const { rps } = await load(sides[name], seconds);
        rates.get(name)!.push(rps);
        console.error(`round ${round + 1}: ${name} ${rps.toFixed(0)} PUT/s`);
      }
    }
    const sqliteRate = median(rates.get('SQLite, 1 node')!);
    console.log(`\nDurable PUTs per second, ${connections} connections, median of ${rounds} rounds of ${seconds} s:`);
    for (const [name, values] of rates) console.log(`  ${name}: ${median(values).toFixed(0)} (${(median(values) / sqliteRate).toFixed(2)} × SQLite)`);
  } finally {
    for (const made of clients) await made.close();
    for (const server of servers) await server.stop();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
  }
}

/** The longest gap between acknowledged PUTs while `disrupt` runs, writers retrying at once through both nodes. */
async function pauseOf(urls: string[], disrupt: () => Promise<void>, after: () => Promise<void>): Promise<{ gap: number; acks: number[] }> {
  const acks: number[] = [];
  let writing = true;
  const writer = async (w: number) => {
    for (let attempt = 0; writing; attempt++) {
      const res = await fetch(`${urls[(w + attempt) % urls.length]}/v1/keys/pause-${w}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ value: attempt }),
        signal: AbortSignal.timeout(30_000),
      }).catch(() => null);
      if (res?.status === 200) acks.push(Date.now());
      else await new Promise((resolve) => setTimeout(resolve, 50));
      await res?.arrayBuffer().catch(() => {});
    }
  };
  const writers = [0, 1, 2, 3].map(writer);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const from = Date.now();
  await disrupt();
  await waitFor(() => acks.some((at) => at > from) && Date.now() - Math.max(...acks) < 200 && acks.filter((at) => at > from).length > 20, 60_000, 'writes to resume');
  await after();
  writing = false;
  await Promise.all(writers);
  const times = acks.filter((at) => at >= from - 1000).sort((a, b) => a - b);
  let gap = 0;
  for (let i = 1; i < times.length; i++) gap = Math.max(gap, times[i]! - times[i - 1]!);
  return { gap, acks };
}

async function healthy(cluster: HaCluster): Promise<void> {
  await waitFor(async () => {
    const members = await cluster.members();
    return members.length === 3 && members.every((m) => ['running', 'streaming'].includes(m.state)) && members.some((m) => m.role === 'sync_standby');
  }, 90_000, 'a healthy cluster');
}

async function pauses(cluster: HaCluster): Promise<void> {
  const nodes = [await pgNode(cluster.url), await pgNode(cluster.url)];
  const urls = nodes.map((n) => n.url);
  const machine: number[] = [];
  const afterRouting: number[] = [];
  const switchover: number[] = [];
  try {
    for (let run = 0; run < failovers; run++) {
      await healthy(cluster);
      const leader = (await cluster.leader())!;
      let routedAt = 0;
      const { gap, acks } = await pauseOf(
        urls,
        async () => {
          await cluster.killMachine(leader);
          // When HAProxy first sends a connection to another member.
          void (async () => {
            while (routedAt === 0) {
              const to: MemberName | null = await cluster.routedTo().catch(() => null);
              if (to !== null && to !== leader) routedAt = Date.now();
              else await new Promise((resolve) => setTimeout(resolve, 50));
            }
          })();
        },
        async () => cluster.restartMachine(leader),
      );
      machine.push(gap);
      const firstAfterRouting = acks.find((at) => at >= routedAt);
      if (routedAt > 0 && firstAfterRouting !== undefined) afterRouting.push(firstAfterRouting - routedAt);
      console.error(`machine loss ${run + 1}: writes paused ${gap} ms; first write ${firstAfterRouting! - routedAt} ms after HAProxy routed to the new primary`);

      await healthy(cluster);
      const { gap: planned } = await pauseOf(urls, async () => void (await cluster.switchover()), async () => {});
      switchover.push(planned);
      console.error(`switchover ${run + 1}: writes paused ${planned} ms`);
    }
    console.log(`\nWrite pause seen by statelog's clients, median of ${failovers}:`);
    console.log(`  leader machine lost: ${median(machine)} ms (all: ${machine.join(', ')}); first write after HAProxy routed to the new primary: ${median(afterRouting)} ms`);
    console.log(`  planned switchover: ${median(switchover)} ms (all: ${switchover.join(', ')})`);
  } finally {
    for (const n of nodes) await n.stop();
  }
}

buildServer();
const cluster = await startCluster();
try {
  await throughput(cluster);
  await pauses(cluster);
} finally {
  await cluster.stop();
}
