// How long writes pause with deploy/ha's settings, on the loopback cluster of
// test/ha/support/cluster.ts: the leader's machine lost (kill -9 of its Patroni and
// PostgreSQL), and a planned switchover, each `runs` times on one cluster (median printed).
// For each: when Patroni names a new leader, when the new leader acknowledges its first
// write through HAProxy, and the longest time a writer that reconnects at once went
// without an acknowledged write.
//   flock /tmp/statelog-heavy.lock npx tsx test/ha/measure-failover.ts [runs]
import { HaCluster, waitFor } from './support/cluster.js';

const runs = Number(process.argv[2] ?? 3);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

interface Pause {
  /** Patroni names a new leader. */
  leader: number;
  /** The first write acknowledged by the new leader, through HAProxy. */
  write: number;
  /** The longest time without an acknowledged write (each on a new connection through HAProxy). */
  gap: number;
}

/**
 * Starts `disrupt` while a writer writes through HAProxy without pause, each write on a new
 * connection (a client that reconnects at once), and times from the disruption's start.
 */
async function timePause(cluster: HaCluster, old: string, disrupt: () => Promise<unknown>): Promise<Pause> {
  const acks: { at: number; port: number }[] = [];
  let writing = true;
  const writer = (async () => {
    while (writing) {
      try {
        const [row] = await cluster.viaProxy<{ port: number }>('INSERT INTO harness.probe DEFAULT VALUES RETURNING inet_server_port() AS port', [], 1000, 15_000);
        acks.push({ at: Date.now(), port: row!.port });
      } catch {
        await new Promise((done) => setTimeout(done, 20));
      }
    }
  })();
  await waitFor(() => acks.length > 0, 10_000, 'a first write');
  const oldPort = acks.at(-1)!.port;
  const started = Date.now();
  const disrupted = disrupt();
  const leader = await waitFor(async () => {
    const now = await cluster.leader();
    return now !== null && now !== old ? Date.now() - started : 0;
  }, 30_000, 'a new leader');
  const first = await waitFor(() => acks.find((ack) => ack.at > started && ack.port !== oldPort), 30_000, 'a write on the new leader');
  writing = false;
  await Promise.all([writer, disrupted]);
  let gap = 0;
  for (let i = 1; i < acks.length && acks[i - 1]!.at <= first.at; i++) gap = Math.max(gap, acks[i]!.at - acks[i - 1]!.at);
  return { leader, write: first.at - started, gap };
}

async function settle(cluster: HaCluster): Promise<void> {
  await waitFor(async () => {
    const members = await cluster.members();
    return members.filter((m) => ['running', 'streaming'].includes(m.state)).length === 3 && members.some((m) => m.role === 'sync_standby');
  }, 90_000, 'three running members and a synchronous standby');
}

function report(what: string, pauses: Pause[]): void {
  const line = (p: Pause) => `new leader named after ${p.leader} ms, first write acknowledged by it after ${p.write} ms, longest time without an acknowledged write ${p.gap} ms`;
  for (const [i, p] of pauses.entries()) console.log(`${what}, run ${i + 1}: ${line(p)}`);
  console.log(`${what}, median of ${pauses.length}: ${line({ leader: median(pauses.map((p) => p.leader)), write: median(pauses.map((p) => p.write)), gap: median(pauses.map((p) => p.gap)) })}`);
}

const reason = HaCluster.available();
if (reason) throw new Error(reason);
const cluster = new HaCluster();
try {
  await cluster.start();
  const lost: Pause[] = [];
  for (let i = 0; i < runs; i++) {
    await settle(cluster);
    const old = (await cluster.leader())!;
    lost.push(await timePause(cluster, old, () => cluster.killMachine(old)));
    await cluster.restartMachine(old);
  }
  const planned: Pause[] = [];
  for (let i = 0; i < runs; i++) {
    await settle(cluster);
    const old = (await cluster.leader())!;
    planned.push(await timePause(cluster, old, () => cluster.switchover()));
  }
  report('leader machine lost', lost);
  report('switchover', planned);
} catch (error) {
  console.error(cluster.logs());
  throw error;
} finally {
  await cluster.stop();
}
