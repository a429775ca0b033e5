// The routes an app registered, read from fastify's own route tree (printRoutes), so
// that the app needs no member kept for tests.
import type { FastifyInstance } from 'fastify';

export interface RouteEntry {
  method: string;
  /** The pattern as registered (`/v1/keys/:key`). */
  url: string;
}

// "│   ├── /:key (PUT, GET)": the tree drawing, then a segment, then its methods if any.
const LINE = /^((?:[│ ] {3})*)[├└]── (.*?)(?: \(([A-Z, ]+)\))?$/;

export function registeredRoutes(app: FastifyInstance): RouteEntry[] {
  const routes: RouteEntry[] = [];
  const path: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = LINE.exec(line);
    if (!match) continue;
    const depth = match[1]!.length / 4;
    path.length = depth;
    path.push(match[2]!);
    const url = path.join('');
    for (const method of match[3]?.split(', ') ?? []) routes.push({ method, url });
  }
  return routes;
}
