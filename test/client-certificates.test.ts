// Client certificates (STATELOG_TLS_CLIENT_CA): the entries made by `statelog token new`,
// the command and the client presenting a certificate whose CN names one, and the CA
// replaced on SIGHUP in a real server process. Certificates are made by the test.
import { copyFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StatelogClient, StatelogError } from '@statelog/client';
import { makeTestCa, type Issued, type TestCa } from './support/certificates.js';
import { cli } from './support/cli.js';
import { startServer, type ListeningServer } from './support/child-server.js';
import { startApp, tempDir, type TestApp } from './support/helpers.js';

let ca: TestCa;
let other: TestCa;
beforeAll(() => {
  ca = makeTestCa();
  other = makeTestCa('another CA');
});
afterAll(() => {
  rmSync(ca.dir, { recursive: true, force: true });
  rmSync(other.dir, { recursive: true, force: true });
});

/** `statelog token new`: the secret on its first line, the entry on its second. */
async function newToken(args: string[]): Promise<{ secret: string; entry: Record<string, unknown> }> {
  const made = await cli(['token', 'new', ...args]);
  expect(made.code, made.stderr).toBe(0);
  const [secret, entry] = made.stdout.trim().split('\n');
  return { secret: secret!, entry: JSON.parse(entry!) as Record<string, unknown> };
}

describe('client certificates', () => {
  let t: TestApp;
  let url: string;
  let billing: Issued;
  let rootSecret: string;
  beforeAll(async () => {
    const dir = tempDir();
    const scoped = await newToken(['--name', 'svc-billing', '--role', 'write', '--prefix', 'acct/', '--prefix', 'ledger/']);
    const root = await newToken(['--name', 'root', '--role', 'admin']);
    rootSecret = root.secret;
    expect(scoped.entry).toMatchObject({ name: 'svc-billing', role: 'write', prefixes: ['acct/', 'ledger/'] });
    expect(JSON.stringify(scoped.entry)).not.toContain(scoped.secret);
    writeFileSync(join(dir, 'tokens.json'), JSON.stringify([scoped.entry, root.entry]));
    const server = ca.issue('server');
    billing = ca.issue('svc-billing', 'svc-billing');
    t = await startApp(
      { STATELOG_TOKENS_FILE: join(dir, 'tokens.json'), STATELOG_TLS_CERT: server.certPath, STATELOG_TLS_KEY: server.keyPath, STATELOG_TLS_CLIENT_CA: ca.caPath },
      { dir },
    );
    url = `https://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
  });
  afterAll(() => t?.close());

  it('the client presents cert and key: the CN names the entry, no token needed', async () => {
    const client = new StatelogClient({ url, ca: ca.ca, cert: billing.cert, key: readFileSync(billing.keyPath) });
    try {
      expect(await client.put('acct/1', 10)).toMatchObject({ key: 'acct/1' });
      const refused = await client.put('other/1', 1).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(StatelogError);
      expect(refused).toMatchObject({ status: 403, code: 'forbidden' });
    } finally {
      await client.close();
    }
    expect(() => new StatelogClient({ url, cert: billing.cert })).toThrow(/cert and key together/);
  });

  it('the command takes --cert and --cert-key, and a bearer token still speaks for itself', async () => {
    const flags = ['--url', url, '--ca', ca.caPath, '--cert', billing.certPath, '--cert-key', billing.keyPath];
    expect(await cli([...flags, 'put', 'ledger/7', '7'])).toMatchObject({ code: 0 });
    const got = await cli([...flags, 'get', 'ledger/7']);
    expect(got).toMatchObject({ code: 0, stdout: '7\n' });
    const outside = await cli([...flags, 'get', 'other/7']);
    expect(outside.code).toBe(1);
    expect(outside.stderr).toMatch(/^statelog: forbidden: the key is outside this token's key prefixes/);
    const stats = await cli([...flags, 'stats']);
    expect(stats.code).toBe(1);
    expect((await cli([...flags, '--token', rootSecret, 'stats'])).code).toBe(0);
    // A backup is of the whole log: refused to a token with key prefixes, nothing left behind.
    const backup = await cli([...flags, 'backup', '--out', join(t.dir, 'scoped-backup.ndjson')]);
    expect(backup.code).toBe(1);
    expect(backup.stderr).toMatch(/^statelog: forbidden: this needs a token without key prefixes/);
    expect(existsSync(join(t.dir, 'scoped-backup.ndjson'))).toBe(false);
    const half = await cli(['--url', url, '--ca', ca.caPath, '--cert', billing.certPath, 'get', 'ledger/7']);
    expect(half).toMatchObject({ code: 2, stderr: 'statelog: give --cert and --cert-key together\n' });
  });
});

describe('the client CA on SIGHUP', () => {
  let server: ListeningServer | undefined;
  afterAll(() => {
    if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
  });

  /** Whether a TLS handshake with this client certificate is accepted (and a request answered). */
  function handshake(port: number, issued: Issued): Promise<boolean> {
    return new Promise((resolve) => {
      const socket = connect({ host: '127.0.0.1', port, ca: ca.ca, cert: issued.cert, key: readFileSync(issued.keyPath) }, () => {
        socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n');
      });
      let text = '';
      socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
      socket.on('close', () => resolve(text.startsWith('HTTP/1.1 200')));
      socket.on('error', () => resolve(false));
    });
  }

  it('is read again with the certificate: a certificate of the new CA is taken, one of the old refused', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'tokens.json'), '[]');
    const serverCert = ca.issue('process-server');
    const live = join(dir, 'client-ca.pem');
    copyFileSync(ca.caPath, live);
    server = await startServer({
      STATELOG_DB: join(dir, 'statelog.db'),
      STATELOG_TOKENS_FILE: join(dir, 'tokens.json'),
      STATELOG_TLS_CERT: serverCert.certPath,
      STATELOG_TLS_KEY: serverCert.keyPath,
      STATELOG_TLS_CLIENT_CA: live,
    });
    const ours = ca.issue('ours', 'ours');
    const theirs = other.issue('theirs', 'theirs');
    expect(await handshake(server.port, ours)).toBe(true);
    expect(await handshake(server.port, theirs)).toBe(false);

    copyFileSync(other.caPath, live);
    server.proc.kill('SIGHUP');
    const reloaded = () => server!.logs().filter((line) => line.msg === 'TLS certificate and key reloaded').length;
    const deadline = Date.now() + 10_000;
    while (reloaded() === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25));
    expect(server.logs().find((line) => line.msg === 'TLS certificate and key reloaded')).toMatchObject({ clientCa: live });
    expect(await handshake(server.port, theirs)).toBe(true);
    expect(await handshake(server.port, ours)).toBe(false);
    expect(server.proc.exitCode).toBeNull();
  });
});
