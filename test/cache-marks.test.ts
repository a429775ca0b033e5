// What an authenticated answer tells the shared caches in front: `private` on every route
// that can be cached, whether the tokens come from STATELOG_TOKENS or STATELOG_TOKENS_FILE,
// so that a cache never hands a tenant's page to a request with no token or another scope.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, tempDir, type TestApp } from './support/helpers.js';
import { bearer, portOf, send, type Received } from './support/http.js';
import { writeTokenFile } from './support/token-file.js';

const SECRET = 'reader-secret-marks';
const WRITER = 'writer-secret-marks';

const SOURCES: [string, (dir: string) => Record<string, string>][] = [
  ['STATELOG_TOKENS', () => ({ STATELOG_TOKENS: `read:${SECRET},write:${WRITER}` })],
  [
    'STATELOG_TOKENS_FILE',
    (dir) => ({
      STATELOG_TOKENS_FILE: writeTokenFile(dir, [
        { name: 'reader', secret: SECRET, role: 'read', prefixes: ['a/'] },
        { name: 'writer', secret: WRITER, role: 'write' },
      ]),
    }),
  ],
];

describe.each(SOURCES)('with tokens from %s', (_source, env) => {
  let t: TestApp;
  let port: number;
  let epoch: string;
  const get = (path: string, headers: Record<string, string> = {}): Promise<Received> =>
    send(port, { method: 'GET', path, headers: { ...bearer(SECRET), ...headers } });

  beforeAll(async () => {
    const dir = tempDir();
    t = await startApp(env(dir), { dir });
    port = portOf(t.app.server);
    const body = JSON.stringify({ records: [{ key: 'a/1', value: 1 }, { key: 'a/2', value: 2 }] });
    const res = await send(port, { method: 'POST', path: '/v1/records', headers: { ...bearer(WRITER), 'content-type': 'application/json' }, body });
    expect(res.status).toBe(200);
    epoch = ((await get('/v1/changes?after=0')).json as { epoch: string }).epoch;
  });
  afterAll(() => t.close());

  const cacheable = (): [string, () => Promise<Received>][] => [
    ['a history page', () => get(`/v1/changes?after=0&epoch=${epoch}&prefix=a%2F`)],
    ['a page without the epoch', () => get('/v1/changes?after=0&prefix=a%2F')],
    ['a head page', () => get(`/v1/changes?after=2&epoch=${epoch}&prefix=a%2F`)],
    ['a long poll that ends at the head', () => get(`/v1/changes?after=2&epoch=${epoch}&prefix=a%2F&wait=1`)],
    ['a snapshot of a state', () => get('/v1/snapshot?minOffset=1&prefix=a%2F')],
    ['a snapshot not modified', () => get('/v1/snapshot?minOffset=1&prefix=a%2F', { 'if-none-match': `"${epoch}:2"` })],
  ];

  it('marks every cacheable answer private', async () => {
    for (const [what, ask] of cacheable()) {
      const res = await ask();
      expect(res.status, what).toBeLessThan(400);
      expect(res.headers['cache-control'], what).toMatch(/^private, max-age=\d+/);
    }
  });

  it('marks no answer to a token public', async () => {
    for (const path of ['/v1/keys/a%2F1', '/v1/keys/a%2F1/history', '/v1/keys?prefix=a%2F', '/v1/changes/stream?after=0&prefix=a%2F']) {
      const res = await send(port, { method: 'GET', path, headers: bearer(SECRET), stream: path.includes('stream') });
      expect(res.status, path).toBe(200);
      expect(String(res.headers['cache-control'] ?? ''), path).not.toMatch(/public/);
    }
  });
});
