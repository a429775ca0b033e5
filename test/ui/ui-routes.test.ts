// GET /ui, /ui/ and /ui/{file} over HTTP (no browser): open without a token while
// everything else still needs one, content types, caching and validators, gzip, the
// security headers of the page, 404s; and docs/openapi-fragments/ui.yaml, merged into
// openapi.yaml, is valid OpenAPI 3.1 and describes these answers.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compileErrors, validate } from '@readme/openapi-parser';
import Fastify from 'fastify';
import type { Response } from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { errorHandler } from '../../src/http/error-handler.js';
import { acceptsGzip, loadAssets, uiRoutes } from '../../src/routes/ui.js';
import { startApp, type TestApp } from '../support/helpers.js';
import { bearer } from '../support/http.js';
import { registeredRoutes } from '../support/routes.js';

const READ_TOKEN = 'ui-routes-read';
const IMMUTABLE = 'public, max-age=31536000, immutable';

let t: TestApp;
let page: string;
/** The files the page links to, and the one its style sheet links to. */
let linked: string[];

beforeAll(async () => {
  // dist/ui is built by the project's globalSetup (test/support/ui-global-setup.ts).
  // No load shedding: a busy machine (Chromium starting beside) must not turn an answer into a 503.
  t = await startApp({ STATELOG_TOKENS: `read:${READ_TOKEN}`, STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' });
  page = (await t.http.get('/ui/').expect(200)).text;
  const fromPage = [...page.matchAll(/(?:href|src)="([^"#][^"]*)"/g)].map((m) => m[1]!);
  const css = fromPage.find((file) => file.endsWith('.css'))!;
  const fromCss = [...(await t.http.get(`/ui/${css}`).expect(200)).text.matchAll(/url\(["']?([^"')]+)/g)].map((m) => m[1]!);
  linked = [...fromPage, ...fromCss.map((file) => file.replace(/^\.\//, ''))];
});
afterAll(async () => {
  await t.close();
});

describe('GET /ui', () => {
  it('redirects /ui to /ui/ with a relative Location, keeping the query string', async () => {
    const res = await t.http.get('/ui').expect(308);
    expect(res.headers.location).toBe('ui/');
    expect((await t.http.get('/ui?theme=x').expect(308)).headers.location).toBe('ui/?theme=x');
  });

  it('serves the page without a token, revalidated, with a strict content security policy', async () => {
    const res = await t.http.get('/ui/').expect(200);
    expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(res.headers['cache-control']).toBe('no-cache');
    expect(res.headers.etag).toMatch(/^"[\w-]+"$/);
    expect(res.headers['content-security-policy']).toContain("default-src 'none'");
    expect(res.headers['content-security-policy']).toContain("script-src 'self'");
    expect(res.headers['content-security-policy']).toContain("frame-ancestors 'none'");
    expect(res.headers['x-frame-options']).toBe('DENY');
    expect(res.headers['referrer-policy']).toBe('no-referrer');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.text).toMatch(/^<!doctype html>/);
    expect(res.text).not.toMatch(/https?:\/\//);
    expect((await t.http.get('/ui/index.html').expect(200)).text).toBe(res.text);
  });

  it('serves every file the page links, with its content type; hashed names are cached for a year', async () => {
    expect(linked.map((file) => file.replace(/-[A-Z0-9]{8}\./, '-HASH.')).sort()).toEqual(
      ['app-HASH.js', 'favicon-HASH.svg', 'favicon.svg', 'style-HASH.css'].sort(),
    );
    const types = { js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8', svg: 'image/svg+xml' };
    for (const file of linked) {
      const res = await t.http.get(`/ui/${file}`).expect(200);
      expect(res.headers['content-type']).toBe(types[file.split('.').pop() as keyof typeof types]);
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      expect(res.headers['cache-control']).toBe(file === 'favicon.svg' ? 'no-cache' : IMMUTABLE);
    }
    const script = linked.find((file) => file.endsWith('.js'))!;
    const map = await t.http.get(`/ui/${script}.map`).expect(200);
    expect(map.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(JSON.parse(map.text).sources.some((source: string) => source.endsWith('ui/main.ts'))).toBe(true);
  });

  it('answers If-None-Match with 304, and HEAD with the headers alone', async () => {
    const first = await t.http.get('/ui/').expect(200);
    const again = await t.http.get('/ui/').set('if-none-match', String(first.headers.etag)).expect(304);
    expect(again.text).toBe('');
    expect(again.headers.etag).toBe(first.headers.etag);
    await t.http.get('/ui/').set('if-none-match', '"other"').expect(200);
    const head = await t.http.head('/ui/').expect(200);
    expect(head.headers.etag).toBe(first.headers.etag);
  });

  it('compresses with gzip only for clients that accept it', async () => {
    const script = linked.find((file) => file.endsWith('.js'))!;
    const zipped = await t.http.get(`/ui/${script}`).set('accept-encoding', 'gzip').expect(200);
    expect(zipped.headers['content-encoding']).toBe('gzip');
    expect(zipped.headers.vary).toBe('accept-encoding');
    const plain = await t.http.get(`/ui/${script}`).set('accept-encoding', 'identity').expect(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.text).toBe(zipped.text);
  });

  it('keeps everything else closed: /v1 and other methods on /ui still need a token', async () => {
    await t.http.get('/v1/stats').expect(401);
    await t.http.get('/v1/stats').set(bearer(READ_TOKEN)).expect(200);
    const post = await t.http.post('/ui/').send('token=x').expect(401);
    expect(post.body.error.code).toBe('unauthorized');
  });

  it('answers 404 not_found for a file that is not in the build, whatever the path tricks', async () => {
    for (const path of ['/ui/nope.js', '/ui/..%2Fpackage.json', '/ui/%2E%2E', '/ui/.tsbuildinfo']) {
      const res = await t.http.get(path);
      expect(res.status, path).toBe(404);
      expect(res.body.error.code, path).toBe('not_found');
    }
  });

  it('answers 404 with a hint when the dashboard was not built', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'statelog-ui-'));
    try {
      expect(loadAssets(empty)).toBeNull();
      const app = Fastify();
      app.setErrorHandler(errorHandler);
      await app.register(uiRoutes, { dir: empty });
      const res = await app.inject({ method: 'GET', url: '/ui/' });
      expect(res.statusCode).toBe(404);
      expect(res.json()).toEqual({ error: { code: 'not_found', message: 'the dashboard is not built: run npm run build' } });
      await app.close();
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it.each([
    ['gzip, deflate, br', true],
    ['br;q=1.0, gzip;q=0.8', true],
    ['GZIP', true],
    ['*', true],
    ['gzip;q=0', false],
    ['identity', false],
    ['', false],
    [undefined, false],
  ])('Accept-Encoding %j allows gzip: %s', (header, allowed) => {
    expect(acceptsGzip(header)).toBe(allowed);
  });
});

// ---- the OpenAPI fragment ------------------------------------------------------------

type Node = Record<string, unknown>;
interface Document {
  openapi: string;
  tags: Node[];
  paths: Record<string, Node>;
  components: Record<string, Record<string, unknown>>;
}

const root = new URL('../../', import.meta.url);
/** openapi.yaml, where the dashboard's routes are documented with the API's. */
function merged(): Document {
  return parse(readFileSync(new URL('openapi.yaml', root), 'utf8')) as Document;
}
const fragment = { paths: Object.fromEntries(Object.entries(merged().paths).filter(([path]) => path.startsWith('/ui'))) };

/** Follows a local $ref of the merged document. */
function resolve(document: Document, node: Node): Node {
  const ref = node.$ref;
  if (typeof ref !== 'string') return node;
  let value: unknown = document;
  for (const segment of ref.slice(2).split('/')) value = (value as Node)[segment];
  return resolve(document, value as Node);
}

/** What the fragment says is wrong with this answer (status, media type, required headers). */
function problems(template: string, res: Response): string[] {
  const document = merged();
  const operation = document.paths[template]?.get as Node | undefined;
  if (!operation) return [`no GET ${template}`];
  const response = (operation.responses as Node)[String(res.status)] as Node | undefined;
  if (!response) return [`GET ${template} has no ${res.status}`];
  const found: string[] = [];
  const { headers = {}, content } = resolve(document, response) as { headers?: Record<string, Node>; content?: Node };
  for (const [name, header] of Object.entries(headers)) {
    const { required, schema } = resolve(document, header) as { required?: boolean; schema: Node };
    const value = res.headers[name.toLowerCase()] as string | undefined;
    if (value === undefined) {
      if (required) found.push(`missing header ${name}`);
      continue;
    }
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern).test(value)) found.push(`${name} ${value} !~ ${schema.pattern}`);
    if (schema.const !== undefined && schema.const !== value) found.push(`${name} ${value} is not ${String(schema.const)}`);
    if (Array.isArray(schema.enum) && !schema.enum.includes(value)) found.push(`${name} ${value} is not one of ${schema.enum.join(' | ')}`);
  }
  const type = (res.headers['content-type'] as string | undefined)?.split(';')[0];
  if (content && (!type || !(type in content))) found.push(`media type ${type} is not documented`);
  if (!content && res.text) found.push('a body where none is documented');
  return found;
}

describe('the dashboard in openapi.yaml', () => {
  it('is valid OpenAPI 3.1', async () => {
    const result = await validate(merged() as unknown as Parameters<typeof validate>[0]);
    expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
  });

  it('documents exactly the /ui routes the app registers', () => {
    const registered = registeredRoutes(t.app)
      .filter(({ method, url }) => method === 'GET' && url.startsWith('/ui'))
      .map(({ url }) => url.replace(/:(\w+)/g, '{$1}'));
    expect([...new Set(registered)].sort()).toEqual(Object.keys(fragment.paths).sort());
  });

  it('describes the real answers', async () => {
    const script = linked.find((file) => file.endsWith('.js'))!;
    const etag = (await t.http.get('/ui/')).headers.etag as string;
    const answers: [string, Response][] = [
      ['/ui', await t.http.get('/ui')],
      ['/ui/', await t.http.get('/ui/')],
      ['/ui/', await t.http.get('/ui/').set('if-none-match', etag)],
      ['/ui/{file}', await t.http.get(`/ui/${script}`)],
      ['/ui/{file}', await t.http.get(`/ui/${script}.map`)],
      ['/ui/{file}', await t.http.get('/ui/favicon.svg')],
      ['/ui/{file}', await t.http.get('/ui/nope.css')],
    ];
    for (const [template, res] of answers) expect(problems(template, res), `${template} ${res.status}`).toEqual([]);
    expect(answers.map(([, res]) => res.status)).toEqual([308, 200, 304, 200, 200, 200, 404]);
  });
});
