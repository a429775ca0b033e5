// statelog on the shipped high-availability topology (test/ha/support/cluster.ts: etcd,
// three PostgreSQL members under Patroni in synchronous mode, HAProxy to the primary), two
// statelog processes through HAProxy, under writers that retry with Idempotency-Key and
// followers of every kind. Each fault must lose no acknowledged write, apply none twice,
// leave every follower equal to the server (or told to reset), keep /readyz truthful and
// quick, and leave no node serving a record the database lacks. The last scenario forks
// the history (a commit whose wait for the standby was cancelled, then a failover to a
// standby without it) and checks that no reader was served the lost record.
import { randomUUID } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import pg from 'pg';
import { StateMirror } from '@statelog/client';
import { toApiError } from '../../src/http/error-handler.js';
import { postgresErrorKinds } from '../../src/store/postgres/errors.js';
import { BARRIER } from '../../src/store/postgres/sql.js';
import { translate } from '../../src/store/store-errors.js';
import { spawnServer, type UrlServer } from '../support/child-server.js';
import { cuttableProxy } from '../support/flaky-proxy.js';
import { HaCluster, startCluster, waitFor, type MemberName } from './support/cluster.js';
import { servedRecords, Workload, type Outcome } from './support/workload.js';

const REASON = HaCluster.available();
const SKIP = REASON !== null && process.env.CI !== 'true';
if (SKIP) console.warn(`HA failover tests skipped: ${REASON}`);

/** Kept short so that the scenarios where commits cannot complete answer quickly. */
const WRITE_TIMEOUT_MS = 4000;
/** A fault that stops commits is seen on /readyz within this (the contract's 2 s, and one sampling interval). */
const READY_WITHIN_MS = 2500;
/**
 * /readyz reports what the node knows, never waiting on the database: its median answer, and
 * the slowest one allowed on a machine shared with the cluster and the workload.
 */
const READYZ_MEDIAN_MS = 100;
const READYZ_MAX_MS = 1000;

describe.skipIf(SKIP)('statelog across failovers of a Patroni cluster', { timeout: 180_000 }, () => {
  let cluster: HaCluster;
  const nodes: UrlServer[] = [];
  const urls = () => nodes.map((node) => node.url);

  beforeAll(async () => {
    cluster = await startCluster();
    for (let i = 0; i < 2; i++) nodes.push(await startNode(cluster.url));
  }, 150_000);

  afterAll(async () => {
    for (const node of nodes) node.proc.kill('SIGKILL');
    await cluster?.stop();
  });

  function startNode(databaseUrl: string): Promise<UrlServer> {
    return spawnServer({
      STATELOG_STORE: 'postgres',
      DATABASE_URL: databaseUrl,
      STATELOG_PG_POOL_SIZE: '4',
      STATELOG_PG_QUERY_TIMEOUT_MS: '5000',
      STATELOG_WRITE_TIMEOUT_MS: String(WRITE_TIMEOUT_MS),
      STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0',
    });
  }

  function showLogsOnFailure(): void {
    onTestFailed(() => {
      console.error(cluster.logs(20));
      for (const [i, node] of nodes.entries()) console.error(`--- statelog node ${i}\n${(node.stdout() + node.stderr()).split('\n').slice(-30).join('\n')}`);
    });
  }

  /** Three members running again, one of them a synchronous standby, before the next scenario. */
  async function healthy(): Promise<void> {
    await waitFor(async () => {
      const members = await cluster.members();
      return (
        members.length === 3 &&
        members.some((m) => m.role === 'leader' && m.state === 'running') &&
        members.some((m) => m.role === 'sync_standby' && ['running', 'streaming'].includes(m.state)) &&
        members.every((m) => ['running', 'streaming'].includes(m.state))
      );
    }, 90_000, 'three members, a leader and a synchronous standby');
  }

  /** What every scenario must hold once its writers stop. */
  /** `diverged`: the nodes serving other records than the primary holds (servedButNotStored). */
  function expectNothingLost(outcome: Outcome, diverged: number[]): void {
    expect(outcome.unexpected).toEqual([]);
    expect(outcome.lost).toEqual([]);
    // Every acknowledged write applied once: its retries replayed or reapplied what was lost, never both.
    expect(outcome.counter).toBe(outcome.acked);
    expect(outcome.followerProblems).toEqual([]);
    expect(outcome.mirrorOffsets).toEqual([outcome.head, outcome.head]);
    expect(outcome.watcherOffsets).toEqual([outcome.head, outcome.head]);
    expect(outcome.mirrorsEqual).toEqual([true, true]);
    expect(outcome.watchersEqual).toEqual([true, true]);
    expect(diverged).toEqual([]);
    // The probe answers from what the node knows: never a wait on the database (seconds here).
    const times = outcome.samples.map((s) => s.ms).sort((a, b) => a - b);
    expect(times[Math.floor(times.length / 2)]).toBeLessThan(READYZ_MEDIAN_MS);
    expect(times.at(-1)).toBeLessThan(READYZ_MAX_MS);
  }

  /** The nodes (by index) whose records from offset 0 differ from the primary's log. */
  async function servedButNotStored(): Promise<number[]> {
    const leader = (await cluster.leader())!;
    const rows = await cluster.sql<{ offset: string; key: string; value: string | null }>(leader, 'SELECT seq AS offset, key, value FROM log ORDER BY seq');
    const stored = JSON.stringify(rows.map((r) => ({ offset: Number(r.offset), key: r.key, value: r.value === null ? undefined : (JSON.parse(r.value) as unknown) })));
    const differing: number[] = [];
    for (const [i, url] of urls().entries()) if (JSON.stringify(await servedRecords(url)) !== stored) differing.push(i);
    return differing;
  }

  /**
   * /readyz while commits could not complete: 503 on every node within READY_WITHIN_MS of
   * the fault (when the pause lasted long enough to be seen), and 200 on every sample taken
   * from shortly after writes resumed.
   */
  function expectReadinessTruthful(outcome: Outcome, faultAt: number, resumedAt: number): void {
    for (const node of [0, 1]) {
      const samples = outcome.samples.filter((s) => s.node === node);
      if (resumedAt - faultAt > READY_WITHIN_MS + 500) {
        const early = samples.filter((s) => s.at >= faultAt && s.at <= faultAt + READY_WITHIN_MS);
        expect(early.some((s) => s.status === 503), `node ${node}: a 503 within ${READY_WITHIN_MS} ms of the fault`).toBe(true);
      }
      const after = samples.filter((s) => s.at > resumedAt + READY_WITHIN_MS);
      expect(after.length).toBeGreaterThan(0);
      expect(after.filter((s) => s.status !== 200), `node ${node}: ready once writes pass`).toEqual([]);
    }
  }

  /** Runs a fault under the workload, on a healthy cluster; returns the outcome and the pause it caused. */
  async function scenario(fault: () => Promise<void>, name: string, restore?: () => Promise<void>) {
    await healthy();
    try {
      return await underWorkload(fault, name);
    } finally {
      await restore?.();
    }
  }

  async function underWorkload(fault: () => Promise<void>, name: string) {
    const workload = await Workload.start(urls(), `${name}-${randomUUID().slice(0, 8)}`);
    await workload.progress(30, 20_000);
    const faultAt = Date.now();
    await fault();
    await workload.progress(30, 60_000);
    // /readyz is sampled a while after writes resumed too.
    while (Date.now() < workload.pause().endedAt + READY_WITHIN_MS + 1000) await new Promise((resolve) => setTimeout(resolve, 100));
    const { ms: pause, endedAt: resumedAt } = workload.pause();
    const outcome = await workload.finish();
    console.log(
      `${name}: writes paused ${pause} ms; ${outcome.acked} acknowledged, ${outcome.replayed} replayed, ` +
        `${outcome.failures.length} failed attempts (${summarize(outcome)}); resets ${JSON.stringify(outcome.resets)}; ` +
        `slowest /readyz ${Math.max(...outcome.samples.map((s) => s.ms)).toFixed(1)} ms; ` +
        `/readyz not 200 ${notReady(outcome, faultAt)}`,
    );
    const diverged = await servedButNotStored();
    report({
      scenario: name,
      pauseMs: pause,
      acked: outcome.acked,
      lost: outcome.lost.length,
      appliedTwice: outcome.counter - outcome.acked,
      resets: outcome.resets.length,
      diverged: diverged.length,
    });
    return { outcome, diverged, faultAt, resumedAt, pause };
  }

  it('kill -9 of the primary\'s postmaster: Patroni restarts it in place; nothing lost or doubled', async () => {
    showLogsOnFailure();
    const leader = (await cluster.leader())!;
    const { outcome, diverged, faultAt, resumedAt } = await scenario(() => cluster.killPostmaster(leader), 'postmaster');
    expectNothingLost(outcome, diverged);
    expectReadinessTruthful(outcome, faultAt, resumedAt);
    await healthy();
  });

  it("loss of the primary's machine: the synchronous standby takes over; nothing lost or doubled, followers carry on", async () => {
    showLogsOnFailure();
    const leader = (await cluster.leader())!;
    let syncAtFault: { patroni: MemberName | null; postgres: unknown } | undefined;
    const { outcome, diverged, faultAt, resumedAt, pause } = await scenario(
      async () => {
        // Which standby commits waited for, by Patroni's key and by PostgreSQL's setting, to
        // set beside the member promoted when a follower is told log_diverged.
        const [patroni, [setting]] = await Promise.all([cluster.syncStandby(), cluster.sql(leader, 'SHOW synchronous_standby_names')]);
        syncAtFault = { patroni, postgres: setting?.synchronous_standby_names };
        await cluster.killMachine(leader);
      },
      'machine',
      () => cluster.restartMachine(leader),
    );
    if (outcome.resets.length > 0) console.error(`machine loss: ${leader} lost while Patroni's synchronous standby was ${syncAtFault?.patroni} and synchronous_standby_names '${String(syncAtFault?.postgres)}'; ${await cluster.leader()} promoted`);
    expectNothingLost(outcome, diverged);
    expectReadinessTruthful(outcome, faultAt, resumedAt);
    // The synchronous standby had every acknowledged commit. A follower may still be told to
    // reset (log_diverged), if it was served a commit Patroni let through without a standby
    // (synchronous_mode without strict, while the standby reconnected); never anything else.
    expect(outcome.resets.filter((reset) => !reset.startsWith('log_diverged'))).toEqual([]);
    expect(pause).toBeLessThan(15_000);
    await healthy();
  });

  it('a planned switchover: a short pause, nothing lost or doubled, no reset', async () => {
    showLogsOnFailure();
    const { outcome, diverged, faultAt, resumedAt, pause } = await scenario(async () => {
      await cluster.switchover();
    }, 'switchover');
    expectNothingLost(outcome, diverged);
    expectReadinessTruthful(outcome, faultAt, resumedAt);
    expect(outcome.resets).toEqual([]);
    expect(pause).toBeLessThan(8000);
    await healthy();
  });

  it('loss of the synchronous standby (not strict): the primary goes on, nothing lost or doubled', async () => {
    showLogsOnFailure();
    const standby = (await cluster.syncStandby())!;
    const { outcome, diverged } = await scenario(() => cluster.killMachine(standby), 'standby', () => cluster.restartMachine(standby));
    expectNothingLost(outcome, diverged);
    expect(outcome.resets).toEqual([]);
    await healthy();
  });

  it('loss of every standby in strict mode: writes answered by their deadline, /readyz says commits are not completing, all resolves once one is back', async () => {
    showLogsOnFailure();
    await healthy();
    await cluster.setConfig({ synchronous_mode_strict: true });
    try {
      let stopped: MemberName[] = [];
      const { outcome, diverged, faultAt } = await scenario(async () => {
        stopped = await cluster.stopStandbys();
        // Long enough for held writes to pass their deadline and for readiness to be sampled.
        await new Promise((resolve) => setTimeout(resolve, 3 * WRITE_TIMEOUT_MS));
        await cluster.startStandbys(stopped);
      }, 'strict');
      expectNothingLost(outcome, diverged);
      // Held commits were answered by the deadline, as of unknown outcome (or not written, if still queued).
      const held = outcome.failures.filter((f) => f.at > faultAt && f.status === 503);
      expect(held.length).toBeGreaterThan(0);
      expect(held.every((f) => f.outcome === 'unknown' || f.outcome === 'not_written')).toBe(true);
      expect(held.some((f) => f.outcome === 'unknown')).toBe(true);
      // Both nodes said why, within READY_WITHIN_MS of the standbys going (their stop takes a moment).
      for (const node of [0, 1]) {
        const reasons = outcome.samples.filter((s) => s.node === node && s.status === 503).map((s) => s.reason);
        expect(reasons).toContain('commits_not_completing');
      }
    } finally {
      await cluster.setConfig({ synchronous_mode_strict: false });
    }
    await healthy();
  });

  it('a node whose connections reach a read-only standby (a proxy not yet switched): /readyz 503 read_only within 2 s, writes 503, ready again once it reaches the primary', async () => {
    showLogsOnFailure();
    await healthy();
    const leader = (await cluster.leader())!;
    const standby = (await cluster.syncStandby())!;
    const portOf = (name: MemberName) => Number(new URL(cluster.directUrl(name)).port);
    const proxy = await cuttableProxy('127.0.0.1', portOf(leader));
    const through = new URL(cluster.directUrl(leader));
    through.port = String(proxy.port);
    const node = await startNode(through.toString());
    try {
      const ready = async () => {
        const started = performance.now();
        const res = await fetch(`${node.url}/readyz`);
        const body = (await res.json()) as { error?: { reason?: string } };
        return { status: res.status, reason: body.error?.reason, ms: performance.now() - started };
      };
      expect((await ready()).status).toBe(200);

      await proxy.retarget('127.0.0.1', portOf(standby));
      const switched = Date.now();
      const unready = await waitFor(async () => {
        const answer = await ready();
        return answer.status === 503 && answer.reason === 'read_only' ? answer : null;
      }, 5000, '/readyz to say read_only');
      expect(Date.now() - switched).toBeLessThan(READY_WITHIN_MS);
      expect(unready.ms).toBeLessThan(READYZ_MAX_MS);
      expect((await put(node.url, `standby-${randomUUID()}`, 1)).status).toBe(503);
      // A barrier whose connection reached the standby after its group's append reached the
      // primary: PostgreSQL refuses it as internal_error, which is an outage (503), not a 500.
      const onStandby = new pg.Client({ connectionString: cluster.directUrl(standby) });
      await onStandby.connect();
      try {
        const refused = await onStandby.query(BARRIER()).then(() => null, (err: Error) => err);
        expect((refused as { code?: string } | null)?.code).toBe('XX000');
        expect(toApiError(translate(refused, postgresErrorKinds) as Error).statusCode).toBe(503);
      } finally {
        await onStandby.end();
      }

      await proxy.retarget('127.0.0.1', portOf(leader));
      const back = Date.now();
      await waitFor(async () => (await ready()).status === 200, 5000, '/readyz to say ready again');
      expect(Date.now() - back).toBeLessThan(READY_WITHIN_MS);
      expect((await put(node.url, `standby-${randomUUID()}`, 1)).status).toBe(200);
    } finally {
      node.proc.kill('SIGKILL');
      await proxy.close();
    }
  });

  it('a commit whose wait for the standby was cancelled, then lost in a failover: 503 outcome unknown, never served, so no follower has to reset', async () => {
    showLogsOnFailure();
    const ns = `fork-${randomUUID().slice(0, 8)}`;
    const [a, b] = urls() as [string, string];
    const mirrors = [new StateMirror({ url: a, follow: 'changes', warn: () => {}, retry: { baseDelayMs: 50, maxDelayMs: 500 } }), new StateMirror({ url: b, follow: 'stream', warn: () => {}, retry: { baseDelayMs: 50, maxDelayMs: 500 } })];
    const resets: string[][] = [[], []];
    mirrors.forEach((mirror, i) => mirror.on('reset', (event: { reason: string }) => resets[i]!.push(event.reason)));
    try {
      await healthy();
      await Promise.all(mirrors.map((m) => m.ready));
      const before = await put(a, `${ns}/w0`, 0);
      expect(before.status).toBe(200);

      // A reader that took a snapshot at w0 and follows the changes after it, under the snapshot's
      // generation (X-Log-Generation, once the log has several), as a client does.
      const snapshot = await fetch(`${a}/v1/snapshot?prefix=${encodeURIComponent(`${ns}/`)}`);
      expect(snapshot.status).toBe(200);
      await snapshot.text();
      expect(Number(snapshot.headers.get('x-log-offset'))).toBe(before.body.offset);
      const fromW0 = new URL(`${a}/v1/changes`);
      fromW0.searchParams.set('after', String(before.body.offset));
      const generation = snapshot.headers.get('x-log-generation');
      if (generation !== null) fromW0.searchParams.set('gen', generation);
      fromW0.searchParams.set('wait', '1');

      await cluster.setConfig({ synchronous_mode_strict: true });
      const leader = (await cluster.leader())!;
      const standbys = await cluster.stopStandbys();

      // w1 is appended at once; the barrier that would make it durable waits for a standby that is
      // not there, until its wait is cancelled.
      const w1 = put(a, `${ns}/w1`, 1, 'fork-w1');
      const backend = await waitFor(async () => {
        const rows = await cluster.sql<{ pid: number }>(
          leader,
          "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND application_name = 'statelog' AND query NOT LIKE '%pg_is_in_recovery%'",
        );
        return rows[0]?.pid;
      }, 10_000, "the barrier after w1 waiting for the standby");
      await cluster.sql(leader, 'SELECT pg_cancel_backend($1)', [backend]);
      const answer = await w1;
      expect(answer.status).toBe(503);
      expect(answer.body.error?.outcome).toBe('unknown');

      // PostgreSQL kept it "committed locally", but nothing confirmed it: no reader is served it.
      const w1Offset = before.body.offset + 1;
      expect(await cluster.sql(leader, 'SELECT 1 FROM log WHERE key = $1', [`${ns}/w1`])).toHaveLength(1);
      const unserved = await fetch(`${a}${fromW0.pathname}${fromW0.search}`);
      expect(await unserved.text()).not.toContain(`${ns}/w1`);
      expect(unserved.status).toBe(503);
      expect(mirrors.every((m) => m.offset < w1Offset)).toBe(true);

      // The primary's machine is lost; a standby without w1 is made primary.
      await cluster.killMachine(leader);
      await cluster.startStandbys(standbys);
      await waitFor(async () => (await cluster.members()).filter((m) => m.name !== leader && ['running', 'streaming'].includes(m.state)).length === 2, 60_000, 'the standbys to run');
      await cluster.setConfig({ synchronous_mode: false, synchronous_mode_strict: false });
      const candidate = standbys[0]!;
      // Once the lost leader's key expires, Patroni promotes a standby by itself or is told to.
      await waitFor(async () => {
        const now = await cluster.leader();
        if (now === null) await cluster.failover(candidate).catch(() => {});
        return now !== null && standbys.includes(now);
      }, 60_000, 'a standby to be promoted');
      const promoted = (await cluster.leader())!;
      expect(standbys).toContain(promoted);
      expect(await cluster.sql(promoted, 'SELECT 1 FROM log WHERE key = $1', [`${ns}/w1`])).toEqual([]);

      // The next write takes w1's offset, in a new generation of the log.
      const w3 = await waitFor(async () => {
        const res = await put(b, `${ns}/w3`, 3);
        return res.status === 200 ? res : null;
      }, 60_000, 'a write on the new primary');
      expect(w3.body.offset).toBe(w1Offset);

      // The reader that waited at w0 reads on, on either node: w3 at that offset, nothing to undo.
      for (const url of [a, b]) {
        const res = await fetch(`${url}${fromW0.pathname}${fromW0.search}`);
        expect(res.status).toBe(200);
        const body = (await res.json()) as { records: Array<{ offset: number; key: string }> };
        expect(body.records.map((r) => [r.offset, r.key])).toEqual([[w1Offset, `${ns}/w3`]]);
      }

      // w1's retry with its Idempotency-Key is applied once (its first answer was "unknown", and it was lost).
      const retried = await put(b, `${ns}/w1`, 1, 'fork-w1');
      expect(retried.status).toBe(200);
      expect(retried.headers.get('idempotent-replayed')).toBeNull();

      // Followers never held w1: none is told its copy diverged, and each holds the server's state.
      await waitFor(() => mirrors.every((m) => m.offset >= retried.body.offset), 30_000, 'the mirrors to catch up');
      for (const [i, mirror] of mirrors.entries()) {
        expect(resets[i]).not.toContain('log_diverged');
        expect(mirror.get(`${ns}/w1`)).toBe(1);
        expect(mirror.get(`${ns}/w3`)).toBe(3);
      }
      // Acknowledged: w0 before the fork, w3 and w1's retry after it; each is held once.
      const held = await cluster.sql<{ key: string; n: string }>(promoted, 'SELECT key, count(*) AS n FROM log WHERE key = ANY($1) GROUP BY key', [
        [`${ns}/w0`, `${ns}/w3`, `${ns}/w1`],
      ]);
      const diverged = await servedButNotStored();
      report({
        scenario: 'fork',
        acked: 3,
        lost: 3 - held.length,
        appliedTwice: held.filter((row) => Number(row.n) > 1).length,
        resets: resets.flat().length,
        diverged: diverged.length,
      });
      const stats = await fetch(`${a}/v1/stats`).then((res) => res.json() as Promise<{ head: number }>);
      expect(stats.head).toBe(retried.body.offset);
      expect(diverged).toEqual([]);
    } finally {
      for (const mirror of mirrors) await mirror.close();
    }
  });
});

/** One line of JSON per scenario run, when STATELOG_HA_REPORT names a file (test/ha/failover-matrix.ts). */
function report(line: Record<string, unknown>): void {
  const file = process.env.STATELOG_HA_REPORT;
  if (file) appendFileSync(file, `${JSON.stringify(line)}\n`);
}

async function put(url: string, key: string, value: unknown, idempotencyKey?: string) {
  const res = await fetch(`${url}/v1/keys/${encodeURIComponent(key)}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}) },
    body: JSON.stringify({ value }),
    signal: AbortSignal.timeout(30_000),
  }).catch(() => null);
  type Answer = { offset: number; error?: { code: string; outcome?: string } };
  if (!res) return { status: 0, body: {} as Answer, headers: new Headers() };
  return { status: res.status, body: (await res.json().catch(() => ({}))) as Answer, headers: res.headers };
}

/** Per node: from when to when (ms after the fault) /readyz was not 200, and why. */
function notReady(outcome: Outcome, faultAt: number): string {
  return [0, 1]
    .map((node) => {
      const bad = outcome.samples.filter((s) => s.node === node && s.status !== 200);
      if (bad.length === 0) return `node ${node}: never`;
      const reasons = [...new Set(bad.map((s) => s.reason ?? s.status))].join('/');
      return `node ${node}: ${bad[0]!.at - faultAt}..${bad.at(-1)!.at - faultAt} ms (${reasons})`;
    })
    .join(', ');
}

function summarize(outcome: Outcome): string {
  const counts = new Map<string, number>();
  for (const f of outcome.failures) {
    const label = `${f.status}${f.outcome ? ` ${f.outcome}` : ''}${f.code ? ` ${f.code}` : ''}`;
    counts.set(label, (counts.get(label) ?? 0) + 1);
  }
  return [...counts].map(([label, n]) => `${n}× ${label}`).join(', ') || 'none';
}
