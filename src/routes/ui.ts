// GET /ui: the dashboard's static files (dist/ui), read once into memory with a gzip copy, served
// without a token as they hold no data; the page is revalidated on every load, hashed files cached a year.
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

/** The page loads only its own script and style sheet and talks only to this server. */
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
  dir?: string;
}

export const uiRoutes: FastifyPluginAsync<UiRouteOptions> = async (app, options) => {
  const dir = options.dir ?? UI_DIR;
  // Read again while the page is missing, so that a build made after start-up is found.
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

  // The page's links are relative (for a proxy's path prefix): it must load as /ui/, by a relative Location.
  app.get('/ui', { config: { scope: 'open' } }, async (req, reply) => {
    const query = req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
    return reply.code(308).header('location', `ui/${query}`).send();
  });
  app.get('/ui/', { config: { scope: 'open' } }, async (req, reply) => serve(PAGE, req, reply));
  app.get<{ Params: { file: string } }>('/ui/:file', { config: { scope: 'open' } }, async (req, reply) => serve(req.params.file, req, reply));
};
