// A closed loop in the runner's own process: `concurrency` workers each send the next
// request as soon as the last one is answered, for `seconds`. For the loads that check
// or use each answer (incr's results, NATS through its client, PostgreSQL's nodes); the
// throughput figures use bench/shared/load.ts, which one process's event loop cannot limit.
import hdr from 'hdr-histogram-js';
import { Pool } from 'undici';

export interface LoopResult {
  requests: number;
  rps: number;
  /** Milliseconds. */
  p50: number;
  p99: number;
  errors: number;
}

export async function closedLoop(
  concurrency: number,
  seconds: number,
  operation: (worker: number, i: number) => Promise<void>,
): Promise<LoopResult> {
  const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  const deadline = performance.now() + seconds * 1000;
  let requests = 0;
  let errors = 0;
  let firstError: unknown;
  const worker = async (w: number) => {
    for (let i = 0; performance.now() < deadline; i++) {
      const start = performance.now();
      try {
        await operation(w, i);
        histogram.recordValue(Math.round((performance.now() - start) * 1000)); // microseconds
        requests++;
      } catch (err) {
        errors++;
        firstError ??= err;
      }
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  const elapsed = (performance.now() - started) / 1000;
  if (errors > 0) console.warn(`  ${errors} failed requests, the first: ${firstError instanceof Error ? firstError.message : String(firstError)}`);
  return {
    requests,
    rps: requests / elapsed,
    p50: histogram.getValueAtPercentile(50) / 1000,
    p99: histogram.getValueAtPercentile(99) / 1000,
    errors,
  };
}

export interface HttpRequest {
  method: 'GET' | 'PUT' | 'POST';
  path: string;
  body?: string;
  /** Beside the content type of a body (a bearer token, say). */
  headers?: Record<string, string>;
}

/** keep-alive HTTP/1.1 connections to one server, for closedLoop's workers. */
export class HttpClient {
  private readonly pool: Pool;

  constructor(url: string, connections: number) {
    this.pool = new Pool(url, { connections, pipelining: 1 });
  }

  /** Sends a request and resolves with its status and body text. */
  async send(request: HttpRequest): Promise<{ status: number; text: string }> {
    const headers = { ...(request.body === undefined ? {} : { 'content-type': 'application/json' }), ...request.headers };
    const res = await this.pool.request({ method: request.method, path: request.path, headers, ...(request.body === undefined ? {} : { body: request.body }) });
    return { status: res.statusCode, text: await res.body.text() };
  }

  /** Sends a request; anything but a 200 is an error (counted by closedLoop). */
  async expectOk(request: HttpRequest): Promise<string> {
    const { status, text } = await this.send(request);
    if (status !== 200) throw new Error(`${request.method} ${request.path}: status ${status} ${text.slice(0, 200)}`);
    return text;
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/** closedLoop over HTTP: `connections` workers, each sending `next(worker, i)`. */
export async function httpLoad(
  url: string,
  connections: number,
  seconds: number,
  next: (worker: number, i: number) => HttpRequest,
): Promise<LoopResult> {
  const client = new HttpClient(url, connections);
  try {
    return await closedLoop(connections, seconds, async (w, i) => void (await client.expectOk(next(w, i))));
  } finally {
    await client.close();
  }
}
