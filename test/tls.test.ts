// HTTPS: STATELOG_TLS_CERT and STATELOG_TLS_KEY, with certificates made by the test
// (test/support/certificates.ts): a real listening server, requests through undici with
// and without the CA, and the certificate replaced on SIGHUP in a real server process.
import { copyFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type PeerCertificate } from 'node:tls';
import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StatelogClient } from '@statelog/client';
import { makeTestCa, type TestCa } from './support/certificates.js';
import { cli } from './support/cli.js';
import { runServerExpectingExit, startServer, type ListeningServer } from './support/child-server.js';
import { startApp, type TestApp } from './support/helpers.js';

let ca: TestCa;
beforeAll(() => {
  ca = makeTestCa();
});
afterAll(() => rmSync(ca.dir, { recursive: true, force: true }));

/** The certificate a new TLS connection to the port is served. */
function servedCertificate(port: number, verify = true): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, ca: ca.ca, rejectUnauthorized: verify }, () => {
      resolve(socket.getPeerCertificate());
      socket.end();
    });
    socket.once('error', reject);
  });
}

describe('HTTPS in the app', () => {
  let t: TestApp;
  let agent: Agent;
  afterEach(async () => {
    await agent?.close();
    await t?.close();
  });

  it('serves the API over HTTPS to a client that trusts the CA, and refuses one that does not', async () => {
    const issued = ca.issue('app');
    t = await startApp({ STATELOG_TLS_CERT: issued.certPath, STATELOG_TLS_KEY: issued.keyPath });
    const { port } = t.app.server.address() as { port: number };
    agent = new Agent({ connect: { ca: ca.ca } });

    const put = await request(`https://127.0.0.1:${port}/v1/keys/secure`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ value: 'over tls' }),
      dispatcher: agent,
    });
    expect(put.statusCode).toBe(200);
    expect(await put.body.json()).toEqual({ key: 'secure', offset: 1 });
    const get = await request(`https://localhost:${port}/v1/keys/secure`, { dispatcher: agent });
    expect(get.statusCode).toBe(200);
    expect(await get.body.json()).toMatchObject({ value: 'over tls' });

    // Without the CA the certificate is not trusted.
    await expect(request(`https://127.0.0.1:${port}/healthz`)).rejects.toThrow(/self[- ]signed|unable to (get|verify)/i);
    // Plain HTTP on the HTTPS port gets no answer of the API.
    const plain = await request(`http://127.0.0.1:${port}/healthz`).then(
      (res) => res.statusCode,
      (err: Error) => err.message,
    );
    expect(plain).not.toBe(200);
    expect((await servedCertificate(port)).serialNumber).toBe(issued.serial);
  });
});

describe('the client and the CLI over HTTPS', () => {
  let t: TestApp;
  afterEach(async () => {
    await t?.close();
  });

  it('take an https:// URL and a CA file, and fail without the CA', { timeout: 90_000 }, async () => {
    const issued = ca.issue('client');
    t = await startApp({ STATELOG_TLS_CERT: issued.certPath, STATELOG_TLS_KEY: issued.keyPath });
    const { port } = t.app.server.address() as { port: number };
    const url = `https://127.0.0.1:${port}`;

    const client = new StatelogClient({ url, ca: ca.ca });
    expect(await client.put('tls/k', 1)).toEqual({ key: 'tls/k', offset: 1 });
    expect(await client.get('tls/k')).toMatchObject({ value: 1, offset: 1 });
    expect((await client.history('tls/k')).records).toEqual([expect.objectContaining({ offset: 1, op: 'set', value: 1 })]);
    await client.close();
    const untrusting = new StatelogClient({ url, retry: { retries: 0 } });
    await expect(untrusting.get('tls/k')).rejects.toMatchObject({
      code: 'unreachable',
      message: `cannot reach ${url}: TLS certificate not trusted`,
      details: { cause: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' },
    });

    const withFlag = await cli(['--url', url, '--ca', ca.caPath, 'get', 'tls/k'], {});
    expect(withFlag, withFlag.stderr).toMatchObject({ code: 0, stdout: '1\n' });
    const withEnv = await cli(['history', 'tls/k'], { STATELOG_URL: url, STATELOG_CA: ca.caPath });
    expect(withEnv.code, withEnv.stderr).toBe(0);
    expect(JSON.parse(withEnv.stdout)).toMatchObject({ offset: 1, key: 'tls/k', op: 'set', value: 1 });
    const without = await cli(['get', 'tls/k'], { STATELOG_URL: url, STATELOG_CA: '' });
    expect(without).toMatchObject({ code: 3, stderr: `statelog: cannot reach ${url}: TLS certificate not trusted\n` });
    const missing = await cli(['--ca', `${ca.dir}/nope.pem`, 'get', 'tls/k'], { STATELOG_URL: url });
    expect(missing).toMatchObject({ code: 2, stderr: expect.stringMatching(/cannot read --ca .*nope\.pem \(ENOENT\)/) });
  });
});

describe('HTTPS in the server process', () => {
  let server: ListeningServer | undefined;
  afterEach(async () => {
    if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
    server = undefined;
  });

  it('reloads the certificate and key on SIGHUP, keeps the current ones when the new files are bad, and stops on SIGTERM', async () => {
    const first = ca.issue('first');
    const second = ca.issue('second');
    const live = { certPath: `${ca.dir}/live.pem`, keyPath: `${ca.dir}/live.key` };
    copyFileSync(first.certPath, live.certPath);
    copyFileSync(first.keyPath, live.keyPath);
    server = await startServer({
      STATELOG_DB: `${ca.dir}/process.db`,
      STATELOG_TLS_CERT: live.certPath,
      STATELOG_TLS_KEY: live.keyPath,
    });
    expect((await servedCertificate(server.port)).serialNumber).toBe(first.serial);

    copyFileSync(second.certPath, live.certPath);
    copyFileSync(second.keyPath, live.keyPath);
    server.proc.kill('SIGHUP');
    await waitFor(() => server!.logs().some((line) => line.msg === 'TLS certificate and key reloaded'));
    expect((await servedCertificate(server.port)).serialNumber).toBe(second.serial);
    expect(server.proc.exitCode).toBeNull();

    // A key that is not the certificate's: refused with a log line, the second pair kept.
    copyFileSync(first.keyPath, live.keyPath);
    server.proc.kill('SIGHUP');
    await waitFor(() => server!.logs().some((line) => line.msg === 'TLS reload refused; the current certificate is kept'));
    const refused = server.logs().find((line) => line.msg === 'TLS reload refused; the current certificate is kept')!;
    expect(refused.reason).toMatch(/^STATELOG_TLS_KEY: cannot be used with STATELOG_TLS_CERT/);
    expect((await servedCertificate(server.port)).serialNumber).toBe(second.serial);

    writeFileSync(live.keyPath, 'not a key');
    server.proc.kill('SIGHUP');
    await waitFor(() => server!.logs().filter((line) => line.msg === 'TLS reload refused; the current certificate is kept').length === 2);
    expect((await servedCertificate(server.port)).serialNumber).toBe(second.serial);

    // Shutdown over TLS: a long poll in progress is answered (200, nothing new), a
    // connection that sent nothing is closed, and the process exits 0.
    const agent = new Agent({ connect: { ca: ca.ca } });
    const idle = connect({ host: '127.0.0.1', port: server.port, ca: ca.ca });
    await new Promise((resolve) => idle.once('secureConnect', resolve));
    const idleClosed = new Promise((resolve) => idle.once('close', resolve));
    const poll = request(`https://127.0.0.1:${server.port}/v1/changes?after=0&wait=30`, { dispatcher: agent });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const stopped = server.stop('SIGTERM');
    const answer = await poll;
    expect(answer.statusCode).toBe(200);
    expect(await answer.body.json()).toMatchObject({ records: [], head: 0 });
    await idleClosed;
    expect(await stopped).toEqual({ code: 0, signal: null });
    await agent.close();
  });

  it('serves a certificate out of its dates, saying so at warn with the dates at start and on SIGHUP; /readyz stays 200', async () => {
    const expired = ca.issueBetween('expired', '20200101000000Z', '20200102000000Z');
    const early = ca.issueBetween('early', '20990101000000Z', '20990102000000Z');
    const live = { certPath: `${ca.dir}/dated.pem`, keyPath: `${ca.dir}/dated.key` };
    copyFileSync(expired.certPath, live.certPath);
    copyFileSync(expired.keyPath, live.keyPath);
    server = await startServer({ STATELOG_DB: `${ca.dir}/dated.db`, STATELOG_TLS_CERT: live.certPath, STATELOG_TLS_KEY: live.keyPath });
    const warned = (problem: RegExp) => server!.logs().find((line) => line.level === 40 && problem.test(String(line.msg)));
    await waitFor(() => warned(/has expired/) !== undefined);
    expect(warned(/has expired/)).toMatchObject({ cert: live.certPath, validFrom: '2020-01-01T00:00:00.000Z', validTo: '2020-01-02T00:00:00.000Z' });
    const agent = new Agent({ connect: { ca: ca.ca, rejectUnauthorized: false } });
    try {
      expect((await request(`https://127.0.0.1:${server.port}/readyz`, { dispatcher: agent })).statusCode).toBe(200);
      copyFileSync(early.certPath, live.certPath);
      copyFileSync(early.keyPath, live.keyPath);
      server.proc.kill('SIGHUP');
      await waitFor(() => warned(/not valid yet/) !== undefined);
      expect(warned(/not valid yet/)).toMatchObject({ validFrom: '2099-01-01T00:00:00.000Z', validTo: '2099-01-02T00:00:00.000Z' });
      expect((await servedCertificate(server.port, false)).serialNumber).toBe(early.serial);
      expect((await request(`https://127.0.0.1:${server.port}/readyz`, { dispatcher: agent })).statusCode).toBe(200);
    } finally {
      await agent.close();
    }
  });

  it('refuses to start with one line when the key does not match the certificate', async () => {
    const a = ca.issue('mismatch-a');
    const b = ca.issue('mismatch-b');
    const exit = await runServerExpectingExit({ STATELOG_DB: `${ca.dir}/refused.db`, STATELOG_TLS_CERT: a.certPath, STATELOG_TLS_KEY: b.keyPath });
    expect(exit.code).toBe(1);
    expect(exit.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^statelog: invalid setting STATELOG_TLS_KEY: cannot be used with STATELOG_TLS_CERT: .*key values mismatch/),
    ]);
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
