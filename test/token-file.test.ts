// The token file: what it accepts, how each fault is named, and how tokens are looked
// up (one hash, one lookup, whatever the token).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { Authenticator } from '../src/http/auth.js';
import { parseTokenFile } from '../src/token-file.js';
import { startApp, tempDir, type TestApp } from './support/helpers.js';
import { fileEntries, sha256Hex, writeTokenFile } from './support/token-file.js';

const HEX = sha256Hex('secret');

describe('parseTokenFile', () => {
  it('reads entries, lowercases digests and normalises prefixes', () => {
    const text = JSON.stringify([
      { name: 'svc-billing', sha256: HEX.toUpperCase(), role: 'write', prefixes: ['ledger/', 'acct/', 'acct/x/', 'acct/'] },
      { name: 'dash', sha256: sha256Hex('other'), role: 'read' },
    ]);
    expect(parseTokenFile(text)).toEqual([
      { name: 'svc-billing', sha256: HEX, role: 'write', prefixes: ['acct/', 'ledger/'] },
      { name: 'dash', sha256: sha256Hex('other'), role: 'read', prefixes: null },
    ]);
    expect(parseTokenFile('[]')).toEqual([]);
  });

  it.each([
    ['{', /^is not JSON/],
    ['{}', /^must hold a JSON array/],
    ['[1]', /^entry 1 is not an object$/],
    [JSON.stringify([{ name: 'a b', sha256: HEX, role: 'read' }]), /^entry 1: "name" must be/],
    [JSON.stringify([{ name: 'a', sha256: 'abc', role: 'read' }]), /^entry 1 \("a"\): "sha256" must be the 64 hex digits/],
    [JSON.stringify([{ name: 'a', sha256: HEX, role: 'owner' }]), /^entry 1 \("a"\): "role" must be "read", "write" or "admin"$/],
    [JSON.stringify([{ name: 'a', sha256: HEX, role: 'read', prefixes: [] }]), /^entry 1 \("a"\): "prefixes" must be a non-empty array/],
    [JSON.stringify([{ name: 'a', sha256: HEX, role: 'read', prefixes: [''] }]), /^entry 1 \("a"\): prefixes\[0\] is not a non-empty string/],
    [JSON.stringify([{ name: 'a', sha256: HEX, role: 'read', prefixes: ['x\n'] }]), /^entry 1 \("a"\): prefixes\[0\] holds a control character/],
    [JSON.stringify([{ name: 'a', sha256: HEX, role: 'read', prefix: ['x/'] }]), /^entry 1 \("a"\): unknown member "prefix"/],
    [JSON.stringify([{ name: 'a', sha256: HEX, role: 'read' }, { name: 'a', sha256: sha256Hex('b'), role: 'read' }]), /^entry 2 \("a"\) repeats a name$/],
    [JSON.stringify([{ name: 'a', sha256: HEX, role: 'read' }, { name: 'b', sha256: HEX, role: 'read' }]), /^entry 2 \("b"\) repeats another entry's sha256$/],
  ])('refuses %s', (text, message) => {
    expect(() => parseTokenFile(text)).toThrow(message);
  });

  it('stops start-up with one line naming the variable, the file and the entry', () => {
    const path = writeTokenFile(tempDir(), [{ name: 'ok', secret: 's1', role: 'read' }]);
    expect(loadConfig({ STATELOG_TOKENS_FILE: path }).tokensFile).toEqual({ path, entries: [{ name: 'ok', sha256: sha256Hex('s1'), role: 'read', prefixes: null }] });
    const bad = writeTokenFile(tempDir(), [{ name: 'ok', secret: 's1', role: 'read' }, { name: 'svc', secret: 's2', role: 'boss' as never }]);
    expect(() => loadConfig({ STATELOG_TOKENS_FILE: bad })).toThrow(ConfigError);
    expect(() => loadConfig({ STATELOG_TOKENS_FILE: bad })).toThrow(`STATELOG_TOKENS_FILE: "${bad}" entry 2 ("svc"): "role" must be`);
    expect(() => loadConfig({ STATELOG_TOKENS_FILE: '/nonexistent/tokens.json' })).toThrow(/cannot read "\/nonexistent\/tokens.json" \(ENOENT\)/);
  });

  it('asks for a token file and TLS with a client CA', () => {
    expect(() => loadConfig({ STATELOG_TLS_CLIENT_CA: '/x/ca.pem' })).toThrow(/^STATELOG_TLS_CLIENT_CA: needs STATELOG_TLS_CERT and STATELOG_TLS_KEY/);
  });
});

describe('Authenticator', () => {
  const file = fileEntries([
    { name: 'scoped', secret: 'scoped-secret', role: 'write', prefixes: ['a/'] },
    { name: 'root', secret: 'root-secret', role: 'admin' },
  ]).map((entry) => ({ ...entry, prefixes: entry.prefixes ?? null }));

  it('knows file and STATELOG_TOKENS tokens by their secret, and nothing else', () => {
    const auth = new Authenticator(new Map([['legacy-secret', 'read']]), file);
    expect(auth.identify('scoped-secret')).toEqual({ name: 'scoped', role: 'write', prefixes: ['a/'] });
    expect(auth.identify('legacy-secret')).toEqual({ name: 'STATELOG_TOKENS#1', role: 'read', prefixes: null });
    for (const other of ['', 'scoped-secret ', 'root', sha256Hex('root-secret'), 'é'.repeat(5000)]) expect(auth.identify(other)).toBeNull();
  });

  it('replaces the file entries whole, or not at all', () => {
    const auth = new Authenticator(new Map([['legacy-secret', 'read']]), file);
    const next = fileEntries([{ name: 'new', secret: 'new-secret', role: 'read' }]).map((entry) => ({ ...entry, prefixes: null }));
    auth.replaceFile(next);
    expect(auth.identify('scoped-secret')).toBeNull();
    expect(auth.identify('new-secret')?.name).toBe('new');
    // An entry with a STATELOG_TOKENS secret: refused, the set in force kept.
    const clash = fileEntries([{ name: 'clash', secret: 'legacy-secret', role: 'admin' }]).map((entry) => ({ ...entry, prefixes: null }));
    expect(() => auth.replaceFile(clash)).toThrow(/has the secret of a STATELOG_TOKENS token/);
    expect(auth.identify('new-secret')?.name).toBe('new');
    expect(auth.identify('legacy-secret')?.role).toBe('read');
  });

  it('takes the same time for an unknown token as for a known one (whatever its scope)', () => {
    // 100 entries, as a large token file: the known token is a scoped one.
    const many = fileEntries(Array.from({ length: 100 }, (_, i) => ({ name: `svc-${i}`, secret: `secret-${i}-${'x'.repeat(20)}`, role: 'read' as const, prefixes: [`p${i}/`] })));
    const auth = new Authenticator(null, many.map((entry) => ({ ...entry, prefixes: entry.prefixes ?? null })));
    const known = `secret-42-${'x'.repeat(20)}`;
    const unknown = `secret-42-${'x'.repeat(19)}y`;
    const time = (token: string): number => {
      const start = process.hrtime.bigint();
      for (let i = 0; i < 2000; i++) auth.identify(token);
      return Number(process.hrtime.bigint() - start);
    };
    const samples: Record<'known' | 'unknown', number[]> = { known: [], unknown: [] };
    for (let round = 0; round < 60; round++) {
      // Interleaved, so that the machine's load falls on both alike.
      samples.known.push(time(known));
      samples.unknown.push(time(unknown));
    }
    const median = (values: number[]) => values.sort((a, b) => a - b)[values.length >> 1]!;
    const ratio = median(samples.known) / median(samples.unknown);
    expect(ratio).toBeGreaterThan(0.8);
    expect(ratio).toBeLessThan(1.25);
  });
});

describe('a repeated Authorization header', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  /** GET of `key` with `secret` on `agent`'s one connection: the status, and whether the connection was reused. */
  const get = (t: TestApp, agent: http.Agent, key: string, secret: string) =>
    new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
      const { port } = t.app.server.address() as AddressInfo;
      const request = http.get({ host: '127.0.0.1', port, path: `/v1/keys/${encodeURIComponent(key)}`, agent, headers: { authorization: `Bearer ${secret}` } }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, reused: request.reusedSocket }));
      });
      request.on('error', reject);
    });

  it('is answered by the token set in force, on a reused connection and after a reload too', async () => {
    const dir = tempDir();
    const tokens = [
      { name: 'scoped', secret: 'scoped-secret', role: 'read' as const, prefixes: ['a/'] },
      { name: 'other', secret: 'other-secret', role: 'read' as const, prefixes: ['b/'] },
    ];
    t = await startApp({ STATELOG_TOKENS_FILE: writeTokenFile(dir, tokens) }, { dir });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect(await get(t, agent, 'a/1', 'scoped-secret')).toEqual({ status: 404, reused: false });
      expect(await get(t, agent, 'b/1', 'scoped-secret')).toEqual({ status: 403, reused: true });
      expect(await get(t, agent, 'b/1', 'other-secret')).toEqual({ status: 404, reused: true });
      expect(await get(t, agent, 'a/1', 'wrong-secret')).toEqual({ status: 401, reused: true });
      expect(await get(t, agent, 'a/1', 'scoped-secret')).toEqual({ status: 404, reused: true });
      t.app.authenticator!.replaceFile(fileEntries([tokens[1]!]).map((entry) => ({ ...entry, prefixes: entry.prefixes ?? null })));
      expect(await get(t, agent, 'a/1', 'scoped-secret')).toEqual({ status: 401, reused: true });
      expect(await get(t, agent, 'b/1', 'other-secret')).toEqual({ status: 404, reused: true });
    } finally {
      agent.destroy();
    }
  });
});
