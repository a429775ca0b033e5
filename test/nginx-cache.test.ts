// deploy/nginx/statelog.conf.template in front of a real server process: followers that
// take a snapshot (minOffset) and follow `Link` through the cache converge to the server's
// state with no gap and no duplicate, across a write burst, a compaction, a server
// restart and a restore into a new epoch; with tokens, nothing cached reaches a request
// the server would refuse. Needs Debian's nginx (.ci/run installs it).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../harness/server-process.js';
import { childServers, type UrlServer } from './support/child-server.js';
import { cli } from './support/cli.js';
import { writeTokenFile } from './support/token-file.js';
import { hasNginx, startNginx, type RunningNginx } from '../harness/nginx.js';
import { StateMirror } from '@statelog/client';

const SKIP = !hasNginx && process.env.CI !== 'true';
if (SKIP) console.warn('nginx cache tests skipped: no nginx (apt-get install nginx)');

const servers = childServers({ STATELOG_SYNC: 'normal' });
let nginx: RunningNginx | undefined;
let dir: string | undefined;
afterEach(async () => {
  await nginx?.stop();
  nginx = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

interface Record_ {
  offset: number;
  key: string;
  op: 'set' | 'delete';
  value?: unknown;
}

/** A worker as issue-free clients follow: a snapshot with minOffset, then pages by Link. */
class Follower {
  state = new Map<string, string>();
  offset = 0;
  epoch = '';
  snapshots = 0;
  private next = '';
  private stopped = false;
  readonly problems: string[] = [];
  readonly done: Promise<void>;

  constructor(
    private readonly base: string,
    private readonly headers: Record<string, string> = {},
  ) {
    this.done = this.run();
  }

  stop(): Promise<void> {
    this.stopped = true;
    return this.done;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        if (this.next === '') await this.snapshot();
        else await this.page();
      } catch {
        // The server restarting behind nginx: 502 or a reset; ask again shortly.
        await new Promise((done) => setTimeout(done, 100));
      }
    }
  }

  private async snapshot(): Promise<void> {
    const epoch = this.epoch ? `&epoch=${this.epoch}` : '';
    const res = await fetch(`${this.base}/v1/snapshot?minOffset=0${epoch}`, { headers: this.headers });
    if (res.status !== 200) throw new Error(`snapshot ${res.status}`);
    const lines = (await res.text()).trim().split('\n').map((line) => JSON.parse(line) as { key: string; value: unknown; end?: true; offset: number; epoch: string });
    const trailer = lines.pop()!;
    if (!trailer.end) throw new Error('cut');
    this.state = new Map(lines.map((line) => [line.key, JSON.stringify(line.value)]));
    this.offset = trailer.offset;
    this.epoch = trailer.epoch;
    this.snapshots++;
    this.next = `/v1/changes?after=${this.offset}&epoch=${this.epoch}&wait=2`;
  }

  private async page(): Promise<void> {
    const res = await fetch(`${this.base}${this.next}`, { headers: this.headers });
    if (res.status === 410) {
      const body = (await res.json()) as { error: { epoch?: string } };
      if (body.error.epoch) this.epoch = body.error.epoch;
      // Not caught up until the new snapshot is in: converged() must not count the old state.
      this.offset = -1;
      this.next = '';
      return;
    }
    if (res.status !== 200) throw new Error(`changes ${res.status}`);
    const page = (await res.json()) as { records: Record_[]; next: number };
    let last = this.offset;
    for (const record of page.records) {
      if (record.offset <= last) this.problems.push(`record ${record.offset} after ${last}: a duplicate or out of order`);
      last = record.offset;
      if (record.op === 'set') this.state.set(record.key, JSON.stringify(record.value));
      else this.state.delete(record.key);
    }
    if (page.next < this.offset) this.problems.push(`next ${page.next} went back from ${this.offset}`);
    this.offset = page.next;
    this.next = /^<([^>]+)>; rel="next"$/.exec(res.headers.get('link') ?? '')![1]!;
  }
}

async function originState(url: string): Promise<{ state: Map<string, string>; offset: number; epoch: string }> {
  const lines = (await (await fetch(`${url}/v1/snapshot`)).text()).trim().split('\n').map((line) => JSON.parse(line));
  const trailer = lines.pop();
  return { state: new Map(lines.map((line: { key: string; value: unknown }) => [line.key, JSON.stringify(line.value)])), offset: trailer.offset, epoch: trailer.epoch };
}

async function converged(followers: Follower[], origin: string, mirror: StateMirror): Promise<void> {
  const { offset, epoch, state } = await originState(origin);
  await expect.poll(() => followers.every((f) => f.epoch === epoch && f.offset >= offset), { timeout: 30_000, interval: 100 }).toBe(true);
  for (const follower of followers) {
    expect(follower.problems).toEqual([]);
    expect(follower.state).toEqual(state);
  }
  // The client's own mirror, through the same cache, converges exactly as these do.
  await expect.poll(() => mirror.epoch === epoch && mirror.offset >= offset, { timeout: 30_000, interval: 100 }).toBe(true);
  expect(new Map([...mirror.entries()].map(([key, value]) => [key, JSON.stringify(value)]))).toEqual(state);
}

async function writeBurst(url: string, from: number, batches: number): Promise<void> {
  for (let i = from; i < from + batches; i++) {
    const records = Array.from({ length: 10 }, (_, j) => (j === 9 ? { key: `k/${(i * 10) % 50}`, op: 'delete' } : { key: `k/${(i * 10 + j) % 50}`, value: { i, j } }));
    const res = await fetch(`${url}/v1/records`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ records }) });
    expect(res.status).toBe(200);
  }
}

describe.skipIf(SKIP)('statelog behind nginx (deploy/nginx/statelog.conf.template)', { timeout: 180_000 }, () => {
  it('brings followers to the server state across a write burst, a compaction, a restart and a restore into a new epoch', async () => {
    dir = mkdtempSync(join(tmpdir(), 'statelog-nginx-'));
    const port = await freePort();
    const env = { PORT: String(port), STATELOG_TOMBSTONE_RETENTION_MS: '0' };
    let origin: UrlServer = await servers.start(env);
    nginx = await startNginx(dir, `127.0.0.1:${port}`);
    await writeBurst(origin.url, 0, 20);

    const followers = Array.from({ length: 20 }, () => new Follower(nginx!.url));
    const mirror = new StateMirror({ url: nginx.url, retry: { baseDelayMs: 50, maxDelayMs: 500 }, warn: () => {} });
    try {
      await converged(followers, origin.url, mirror);
      const before = nginx.upstreamRequests();
      await writeBurst(origin.url, 20, 30);
      await converged(followers, origin.url, mirror);
      // 20 followers, collapsed by the cache: far fewer requests reached the server than they made.
      expect(nginx.upstreamRequests() - before).toBeLessThan(20 * 30);

      expect((await fetch(`${origin.url}/v1/admin/compact`, { method: 'POST' })).status).toBe(200);
      await writeBurst(origin.url, 50, 10);
      await converged(followers, origin.url, mirror);

      // A restart: nginx answers 502 meanwhile; followers resume where they were.
      const backup = join(dir, 'backup.db');
      expect((await cli(['backup', '--db', join(servers.dir, 'statelog.db'), backup])).code).toBe(0);
      await origin.stop('SIGTERM');
      origin = await servers.start(env);
      await writeBurst(origin.url, 60, 10);
      await converged(followers, origin.url, mirror);
      expect(followers.every((f) => f.snapshots === 1)).toBe(true);
      expect(mirror.snapshots).toBe(1);

      // A restore of the file copy: a new epoch, so every follower takes a new snapshot.
      await origin.stop('SIGTERM');
      const restore = await cli(['restore', '--db', join(servers.dir, 'statelog.db'), backup]);
      expect(restore.code, restore.stderr).toBe(0);
      origin = await servers.start(env);
      await writeBurst(origin.url, 70, 5);
      await converged(followers, origin.url, mirror);
      expect(followers.every((f) => f.snapshots === 2)).toBe(true);
      expect(mirror.snapshots).toBe(2);
      expect((await mirror.verify()).ok).toBe(true);
    } finally {
      await mirror.close();
      await Promise.all(followers.map((f) => f.stop()));
    }
  });

  it('with tokens, never gives a cached answer to a request without a valid token', async () => {
    dir = mkdtempSync(join(tmpdir(), 'statelog-nginx-'));
    const port = await freePort();
    const origin = await servers.start({ PORT: String(port), STATELOG_TOKENS: 'read:reader-secret,write:writer-secret' });
    nginx = await startNginx(dir, `127.0.0.1:${port}`);
    const write = { authorization: 'Bearer writer-secret', 'content-type': 'application/json' };
    const put = await fetch(`${origin.url}/v1/keys/a`, { method: 'PUT', headers: write, body: JSON.stringify({ value: 1 }) });
    expect(put.status).toBe(200);
    const { epoch } = (await (await fetch(`${origin.url}/v1/changes`, { headers: write })).json()) as { epoch: string };
    for (const path of [`/v1/snapshot?minOffset=0`, `/v1/changes?after=0&epoch=${epoch}`, `/v1/changes?after=1&epoch=${epoch}`]) {
      for (let i = 0; i < 2; i++) {
        const allowed = await fetch(`${nginx.url}${path}`, { headers: { authorization: 'Bearer reader-secret' } });
        expect(allowed.status, path).toBe(200);
        expect(allowed.headers.get('cache-control'), path).toMatch(/^private/);
        await allowed.arrayBuffer();
      }
      for (const headers of [{}, { authorization: 'Bearer wrong' }] as Record<string, string>[]) {
        const refused = await fetch(`${nginx.url}${path}`, { headers });
        expect(refused.status, path).toBe(401);
        expect(refused.headers.get('x-cache-status'), path).not.toBe('HIT');
        await refused.arrayBuffer();
      }
    }
  });

  it('keeps Vary and CORS whole through the cache: an origin never gets an answer allowed for another', async () => {
    dir = mkdtempSync(join(tmpdir(), 'statelog-nginx-'));
    const port = await freePort();
    const origin = await servers.start({ PORT: String(port), STATELOG_CORS_ORIGINS: 'https://a.example' });
    nginx = await startNginx(dir, `127.0.0.1:${port}`);
    const put = await fetch(`${origin.url}/v1/keys/a`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"value":1}' });
    expect(put.status).toBe(200);
    const { epoch } = (await (await fetch(`${origin.url}/v1/changes`)).json()) as { epoch: string };
    for (const path of [`/v1/changes?after=0&epoch=${epoch}`, '/v1/snapshot?minOffset=0']) {
      const ask = async (from?: string) => {
        const res = await fetch(`${nginx!.url}${path}`, { headers: from ? { origin: from } : {} });
        await res.arrayBuffer();
        expect(res.status, path).toBe(200);
        return { allow: res.headers.get('access-control-allow-origin'), vary: res.headers.get('vary') ?? '', cache: res.headers.get('x-cache-status') };
      };
      const allowed = await ask('https://a.example');
      expect(allowed.allow, path).toBe('https://a.example');
      expect(allowed.vary, path).toMatch(/\bOrigin\b/i);
      expect((await ask('https://a.example')).cache, path).toBe('HIT');
      // Another origin and no origin: the same URL, never the answer cached for a.example.
      for (const from of ['https://b.example', undefined]) {
        const other = await ask(from);
        expect(other.allow, `${path} from ${from}`).toBeNull();
      }
      expect((await ask('https://a.example')).allow, path).toBe('https://a.example');
    }
    // A preflight passes through to the server (not cached), with the allowed origin only.
    const preflight = (from: string) =>
      fetch(`${nginx!.url}/v1/changes`, { method: 'OPTIONS', headers: { origin: from, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' } });
    const ok = await preflight('https://a.example');
    expect(ok.status).toBe(204);
    expect(ok.headers.get('access-control-allow-origin')).toBe('https://a.example');
    expect((await preflight('https://b.example')).headers.get('access-control-allow-origin')).toBeNull();
  });

  it('with tokens from a token file alone, never gives a cached answer to a request without a valid token', async () => {
    dir = mkdtempSync(join(tmpdir(), 'statelog-nginx-'));
    const port = await freePort();
    const tokens = writeTokenFile(dir, [
      { name: 'reader', secret: 'reader-secret', role: 'read', prefixes: ['a'] },
      { name: 'writer', secret: 'writer-secret', role: 'write' },
    ]);
    const origin = await servers.start({ PORT: String(port), STATELOG_TOKENS_FILE: tokens });
    nginx = await startNginx(dir, `127.0.0.1:${port}`);
    const write = { authorization: 'Bearer writer-secret', 'content-type': 'application/json' };
    expect((await fetch(`${origin.url}/v1/keys/a`, { method: 'PUT', headers: write, body: '{"value":1}' })).status).toBe(200);
    const { epoch } = (await (await fetch(`${origin.url}/v1/changes`, { headers: write })).json()) as { epoch: string };
    for (const path of [`/v1/snapshot?minOffset=0`, `/v1/changes?after=0&epoch=${epoch}`, `/v1/changes?after=1&epoch=${epoch}`]) {
      const allowed = await fetch(`${nginx.url}${path}`, { headers: { authorization: 'Bearer reader-secret' } });
      expect(allowed.status, path).toBe(200);
      expect(allowed.headers.get('cache-control'), path).toMatch(/^private/);
      await allowed.arrayBuffer();
      const refused = await fetch(`${nginx.url}${path}`);
      expect(refused.status, path).toBe(401);
      await refused.arrayBuffer();
    }
  });
});
