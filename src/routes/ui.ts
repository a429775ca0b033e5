// GET /ui: the dashboard, a static page built by `npm run build` (scripts/build-ui.ts)
// into dist/ui. The files hold no data: every figure the page shows comes from /v1
// calls that carry the user's own token, so they are served without one (auth.ts).
//
// The few files are read once into memory (with a gzip copy). The page itself is
// revalidated on every load (ETag, no-cache) so a new build shows at once; the script,
// style sheet and source map have content hashes in their names and are cached for a year.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../contract/errors.js';

/** Where the build puts the page: <project>/dist/ui, from src/routes or dist/routes alike. */
export const UI_DIR = fileURLToPath(new URL('../../dist/ui/', import.meta.url));

const PAGE = 'index.html';
/** Files whose names carry no content hash: revalidated on each use. */
const UNHASHED = new Set([PAGE, 'favicon.svg']);

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/**
 * The page loads only its own script and style sheet and talks only to this server:
 * no inline script, no other origin, no framing.
 */
const PAGE_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
};

interface Asset {
  body: Buffer;
  gzip: Buffer | null;
  type: string;
  etag: string;
  cacheControl: string;
}

/** The built files by name, or null when the dashboard was not built. */
export function loadAssets(dir: string): Map<string, Asset> | null {
  if (!existsSync(join(dir, PAGE))) return null;
  const assets = new Map<string, Asset>();
  for (const name of readdirSync(dir)) {
    const type = TYPES[extname(name)];
    const path = join(dir, name);
    if (!type || !statSync(path).isFile()) continue;
    const body = readFileSync(path);
    const gzip = body.length > 1024 ? gzipSync(body, { level: 9 }) : null;
    assets.set(name, {
      body,
      gzip: gzip && gzip.length < body.length ? gzip : null,
      type,
      etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
      cacheControl: UNHASHED.has(name) ? 'no-cache' : 'public, max-age=31536000, immutable',
    });
  }
  return assets;
}

/** Whether Accept-Encoding allows gzip (present, and not with q=0). */
export function acceptsGzip(header: string | undefined): boolean {
  if (!header) return false;
  return header.split(',').some((part) => {
    const [coding, ...params] = part.trim().toLowerCase().split(';');
    if (coding !== 'gzip' && coding !== '*') return false;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}

export interface UiRouteOptions {
  /** The built files' folder; UI_DIR unless a test says otherwise. */
  dir?: string;
}

export const uiRoutes: FastifyPluginAsync<UiRouteOptions> = async (app, options) => {
  const dir = options.dir ?? UI_DIR;
  // Read at the first request, and again while the page is missing, so a build made
  // after start-up is found; a running server keeps the build it first found.
  let assets: Map<string, Asset> | null = null;
  const built = (): Map<string, Asset> => {
    assets ??= loadAssets(dir);
    if (!assets) throw new ApiError('not_found', 'the dashboard is not built: run npm run build');
    return assets;
  };

  const serve = (name: string, req: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const asset = built().get(name);
    if (!asset) throw new ApiError('not_found', `no file ${name} in the dashboard`);
    reply.headers({
      'content-type': asset.type,
      'cache-control': asset.cacheControl,
      etag: asset.etag,
      'x-content-type-options': 'nosniff',
      ...(name === PAGE ? PAGE_HEADERS : {}),
      ...(asset.gzip ? { vary: 'accept-encoding' } : {}),
    });
    const tags = req.headers['if-none-match']?.split(',').map((tag) => tag.trim().replace(/^W\//, ''));
    if (tags?.includes(asset.etag) || tags?.includes('*')) return reply.code(304).send();
    if (asset.gzip && acceptsGzip(req.headers['accept-encoding'])) {
      return reply.header('content-encoding', 'gzip').send(asset.gzip);
    }
    return reply.send(asset.body);
  };

  // The page's links are relative (so it also works under a proxy's path prefix): it
  // must be loaded as /ui/, and a relative Location keeps any such prefix.
  app.get('/ui', { config: { scope: 'open' } }, async (req, reply) => {
    const query = req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
    return reply.code(308).header('location', `ui/${query}`).send();
  });
  app.get('/ui/', { config: { scope: 'open' } }, async (req, reply) => serve(PAGE, req, reply));
  app.get<{ Params: { file: string } }>('/ui/:file', { config: { scope: 'open' } }, async (req, reply) => serve(req.params.file, req, reply));
};
