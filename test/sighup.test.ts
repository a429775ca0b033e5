// SIGHUP in a real server process: it reloads the token file (whole or not at all, under
// load), logs what it did, counts what it refused, and never stops the server. The access
// log names the token entry of each request, never its secret.
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { childServers } from './support/child-server.js';
import { fileEntries, writeTokenFile, type TestToken } from './support/token-file.js';

const servers = childServers();

const COMMON: TestToken = { name: 'common', secret: 'common-secret', role: 'admin' };
const ONLY_A: TestToken = { name: 'svc-a', secret: 'a-secret', role: 'write', prefixes: ['a/'] };
const ONLY_B: TestToken = { name: 'svc-b', secret: 'b-secret', role: 'write', prefixes: ['b/'] };

/** Replaces the file in one rename, as an operator's tooling should. */
function replaceFile(path: string, text: string): void {
  writeFileSync(`${path}.new`, text);
  renameSync(`${path}.new`, path);
}

async function waitFor(condition: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('SIGHUP', () => {
  it('keeps a plain-HTTP server without a token file running, and says so', async () => {
    const server = await servers.start();
    server.proc.kill('SIGHUP');
    await waitFor(() => server.logs().some((line) => String(line.msg).startsWith('SIGHUP: nothing to reload')));
    const res = await fetch(`${server.url}/healthz`);
    expect(res.status).toBe(200);
    expect(server.proc.exitCode).toBeNull();
  });

  it('reloads the token file under load: no request fails, none sees one set with another\'s scopes', async () => {
    const path = writeTokenFile(servers.dir, [COMMON, ONLY_A]);
    const versions = [JSON.stringify(fileEntries([COMMON, ONLY_A])), JSON.stringify(fileEntries([COMMON, ONLY_B]))];
    const server = await servers.start({ STATELOG_TOKENS_FILE: path });
    const put = (token: TestToken, key: string) =>
      fetch(`${server.url}/v1/keys/${encodeURIComponent(key)}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${token.secret}`, 'content-type': 'application/json' },
        body: '{"value":1}',
      }).then(async (res) => {
        await res.arrayBuffer();
        return res.status;
      });

    let running = true;
    const seen: Record<string, Set<number>> = { common: new Set(), aInA: new Set(), aInB: new Set(), bInA: new Set(), bInB: new Set() };
    const loop = async (worker: number) => {
      for (let i = 0; running; i++) {
        const [common, aInA, aInB, bInA, bInB] = await Promise.all([
          put(COMMON, `c/${worker}/${i}`),
          put(ONLY_A, `a/${worker}`),
          put(ONLY_A, `b/${worker}`),
          put(ONLY_B, `a/${worker}`),
          put(ONLY_B, `b/${worker}`),
        ]);
        seen.common!.add(common);
        seen.aInA!.add(aInA);
        seen.aInB!.add(aInB);
        seen.bInA!.add(bInA);
        seen.bInB!.add(bInB);
      }
    };
    const load = [0, 1, 2, 3].map(loop);
    const reloaded = () => server.logs().filter((line) => line.msg === 'token file reloaded').length;
    for (let n = 1; n <= 20; n++) {
      replaceFile(path, versions[n % 2]!);
      server.proc.kill('SIGHUP');
      await waitFor(() => reloaded() === n);
      await new Promise((resolve) => setTimeout(resolve, 30));
    }
    running = false;
    await Promise.all(load);

    expect(server.proc.exitCode).toBeNull();
    expect([...seen.common!]).toEqual([200]);
    // Each token is either in force with its own prefixes, or unknown: never 200 outside them.
    expect([...seen.aInA!].sort()).toEqual([200, 401]);
    expect([...seen.aInB!].sort()).toEqual([401, 403]);
    expect([...seen.bInA!].sort()).toEqual([401, 403]);
    expect([...seen.bInB!].sort()).toEqual([200, 401]);
    // Version 0 (COMMON and ONLY_A) is in force after the 20th reload.
    expect(await put(ONLY_A, 'a/last')).toBe(200);
    expect(await put(ONLY_B, 'b/last')).toBe(401);

    // A bad file: refused with one error line, counted, the tokens in force kept.
    replaceFile(path, JSON.stringify([{ name: 'broken', sha256: 'nope', role: 'read' }]));
    server.proc.kill('SIGHUP');
    await waitFor(() => server.logs().some((line) => line.msg === 'token file reload refused; the tokens in force are kept'));
    const refused = server.logs().filter((line) => line.level === 50);
    expect(refused).toHaveLength(1);
    expect(refused[0]!.reason).toMatch(/entry 1 \("broken"\): "sha256" must be/);
    expect(await put(ONLY_A, 'a/after-bad')).toBe(200);
    const metrics = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${COMMON.secret}` } }).then((res) => res.text());
    expect(metrics).toMatch(/^statelog_reload_failures_total 1$/m);
    expect(metrics).toMatch(/^statelog_http_requests_by_token_total\{token="svc-a"\} \d+$/m);
    expect(server.proc.exitCode).toBeNull();

    // Who did what: each request's line names the entry, and no line holds a secret.
    const lines = server.logs().filter((line) => line.msg === 'request');
    expect(lines.some((line) => line.name === 'svc-a' && line.status === 200)).toBe(true);
    expect(lines.some((line) => line.name === 'common')).toBe(true);
    const output = server.stdout() + server.stderr();
    for (const token of [COMMON, ONLY_A, ONLY_B]) expect(output).not.toContain(token.secret);
  });

  it('refuses to start on a bad token file with one line naming the entry', async () => {
    const { runServerExpectingExit } = await import('./support/child-server.js');
    const path = join(servers.dir, 'bad-tokens.json');
    writeFileSync(path, JSON.stringify([...fileEntries([COMMON]), { name: 'svc-x', sha256: fileEntries([ONLY_A])[0]!.sha256, role: 'read', prefixes: 'a/' }]));
    const exit = await runServerExpectingExit({ ...(await servers.database()).env, STATELOG_TOKENS_FILE: path });
    expect(exit.code).toBe(1);
    expect(exit.stderr.trim().split('\n')).toEqual([
      `statelog: invalid setting STATELOG_TOKENS_FILE: "${path}" entry 2 ("svc-x"): "prefixes" must be a non-empty array of key prefixes (leave it out for every key)`,
    ]);
  });
});
