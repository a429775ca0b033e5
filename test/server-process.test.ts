// The server process: start-up warnings and refusals, logs without tokens, and a
// graceful shutdown with writes in flight.
import { existsSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { pino, type LoggerOptions } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loggerOptions } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { runServer, startServer, type ListeningServer } from './support/child-server.js';
import { tempDir } from './support/helpers.js';
import { bearer, send } from './support/http.js';

const dirs: string[] = [];
const servers: ListeningServer[] = [];
function dbIn(): string {
  const dir = tempDir();
  dirs.push(dir);
  return join(dir, 'statelog.db');
}
async function start(env: Record<string, string>): Promise<ListeningServer> {
  const server = await startServer(env);
  servers.push(server);
  return server;
}
afterEach(() => {
  for (const server of servers.splice(0)) server.proc.kill('SIGKILL');
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const warnings = (server: ListeningServer) =>
  server.logs().filter((line) => line.level === 40 && String(line.msg).includes('STATELOG_TOKENS'));

describe('start-up', () => {
  it('warns once that every route is open when STATELOG_TOKENS is unset', async () => {
    const server = await start({ STATELOG_DB: dbIn() });
    expect(warnings(server)).toHaveLength(1);
    expect((await server.stop()).code).toBe(0);
  });

  it('does not warn when tokens are set', async () => {
    const server = await start({ STATELOG_DB: dbIn(), STATELOG_TOKENS: 'read:r-token' });
    expect(warnings(server)).toHaveLength(0);
    expect((await server.stop()).code).toBe(0);
  });

  it('stops with exit 1 and one line naming STATELOG_TOKENS when it is malformed, writing nothing', async () => {
    const dbPath = dbIn();
    const child = runServer({ STATELOG_DB: dbPath, STATELOG_TOKENS: 'read:fine-token,superuser:sekrit-token' });
    const exit = await child.exited;
    expect(exit.code).toBe(1);
    const lines = child.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^statelog: invalid setting STATELOG_TOKENS: entry 2 /);
    expect(child.stderr() + child.stdout()).not.toContain('sekrit');
    expect(existsSync(dbPath)).toBe(false);
  });
});

describe('logs', () => {
  it('never contain a token, sent or configured, at any level', async () => {
    const tokens = { read: 'tok-read-Zq81', write: 'tok-write-Xk22', admin: 'tok-admin-Wm93' };
    const wrong = 'tok-wrong-Vv47';
    const server = await start({
      STATELOG_DB: dbIn(),
      LOG_LEVEL: 'trace',
      STATELOG_TOKENS: `read:${tokens.read},write:${tokens.write},admin:${tokens.admin}`,
    });
    const put = (token: string) =>
      send(server.port, {
        method: 'PUT',
        path: '/v1/keys/k',
        headers: { ...bearer(token), 'content-type': 'application/json' },
        body: '{"value":1}',
      });
    expect((await put(tokens.write)).status).toBe(200);
    expect((await put(tokens.read)).status).toBe(403);
    expect((await put(wrong)).status).toBe(401);
    expect((await send(server.port, { method: 'GET', path: '/v1/keys/%ZZ', headers: bearer(wrong) })).status).toBe(401);
    expect((await send(server.port, { method: 'GET', path: '/metrics', headers: bearer(tokens.admin) })).status).toBe(200);
    expect((await server.stop()).code).toBe(0);

    const output = server.stdout() + server.stderr();
    // The requests were logged, so the check below looked at real log lines.
    expect(server.logs().filter((line) => line.msg === 'request')).toHaveLength(5);
    for (const token of [...Object.values(tokens), wrong]) expect(output).not.toContain(token);
  });

  it("writes health checks, scrapes and the dashboard's polls at debug, everything else at info", async () => {
    const server = await start({ STATELOG_DB: dbIn(), LOG_LEVEL: 'info' });
    for (const path of ['/healthz', '/readyz', '/metrics', '/v1/stats']) {
      expect((await send(server.port, { method: 'GET', path })).status).toBe(200);
    }
    const put = { method: 'PUT', path: '/v1/keys/k', headers: { 'content-type': 'application/json' }, body: '{"value":1}' };
    expect((await send(server.port, put)).status).toBe(200);
    expect((await send(server.port, { method: 'GET', path: '/v1/keys/missing' })).status).toBe(404);
    expect((await server.stop()).code).toBe(0);
    const logged = server.logs().filter((line) => line.msg === 'request').map((line) => `${String(line.method)} ${String(line.url)}`);
    expect(logged).toEqual(['PUT /v1/keys/k', 'GET /v1/keys/missing']);
  });
});

describe('graceful shutdown', () => {
  it('on SIGTERM finishes the writes in flight, refuses the rest, checkpoints and exits 0 within 10 s', async () => {
    const dbPath = dbIn();
    const server = await start({ STATELOG_DB: dbPath });
    const count = 300;
    let firstAnswer!: () => void;
    const answered = new Promise<void>((resolve) => (firstAnswer = resolve));
    const results = Promise.all(
      Array.from({ length: count }, (_, i) =>
        send(server.port, {
          method: 'PUT',
          path: `/v1/keys/k${i}`,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ value: { i } }),
        }).then(
          (res) => {
            firstAnswer();
            return { i, status: res.status, body: res.json as { offset?: number } };
          },
          // Not accepted any more (the listener closed): never answered, so no promise made.
          () => ({ i, status: 0, body: {} as { offset?: number } }),
        ),
      ),
    );
    await answered;
    const signalled = Date.now();
    const exit = await server.stop('SIGTERM');
    const elapsed = Date.now() - signalled;
    const answers = await results;

    expect(exit).toEqual({ code: 0, signal: null });
    expect(elapsed).toBeLessThan(10_000);
    expect(answers.every((a) => [0, 200, 503].includes(a.status))).toBe(true);
    const written = answers.filter((a) => a.status === 200);
    expect(written.length).toBeGreaterThan(0);

    const db = new Database(dbPath, { readonly: true });
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      const row = db.prepare(
        'SELECT l.value, l.seq AS offset FROM state s JOIN log l ON l.seq = s.seq WHERE s.key = ? AND s.live = 1',
      );
      for (const a of written) {
        expect(row.get(`k${a.i}`), `k${a.i}`).toEqual({ value: JSON.stringify({ i: a.i }), offset: a.body.offset });
      }
      for (const a of answers.filter((x) => x.status === 503)) expect(row.get(`k${a.i}`), `k${a.i}`).toBeUndefined();
    } finally {
      db.close();
    }
    // Checkpointed on close: the write-ahead log holds nothing.
    expect(!existsSync(`${dbPath}-wal`) || statSync(`${dbPath}-wal`).size === 0).toBe(true);
  });
});

describe('log redaction', () => {
  it('censors the Authorization header wherever request headers are logged', () => {
    const lines: string[] = [];
    const options = loggerOptions(loadConfig({ LOG_LEVEL: 'info' })) as LoggerOptions;
    const log = pino(options, { write: (line: string) => void lines.push(line) });
    const headers = { authorization: 'Bearer sekrit-token', host: 'x' };
    log.info({ req: { headers } }, 'as fastify names it');
    log.info({ request: { headers } }, 'as a route might');
    log.info({ headers }, 'bare');
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      expect(line).not.toContain('sekrit');
      expect(line).toContain('[redacted]');
      expect(line).toContain('"host":"x"');
    }
  });
});
