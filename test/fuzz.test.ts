// Fuzzing the live server process with raw HTTP: random methods, paths, headers and
// bodies (random bytes, huge and tiny, broken UTF-8, deep nesting, odd percent-encoding).
// No answer may be a 5xx, every error answer has the contract's body, the process
// neither crashes nor grows without bound, and the data written before is intact, also
// after a restart. FUZZ_RUNS=20000 runs more (default 3000, about 10 s).
import { randomUUID } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type ListeningServer } from './support/child-server.js';
import { tempDir, testStore, type TestStore } from './support/helpers.js';
import { bearer, send } from './support/http.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 3000);
/** FUZZ_SEED replays a failed run. */
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined;
const TOKENS = { read: 'fz-read-1', write: 'fz-write-2', admin: 'fz-admin-3' };
const MAX_VALUE_BYTES = 4096;
/** Peak resident memory allowed to the server process. */
const MAX_RSS_BYTES = 400 * 1024 * 1024;

interface RawRequest {
  method: string;
  target: string;
  headers: [string, string][];
  body: Buffer;
  chunked: boolean;
}

interface RawAnswer {
  status: number | null;
  headers: Record<string, string>;
  body: Buffer;
}

// --- generators ---

const text = (maxLength: number) => fc.string({ unit: 'binary', maxLength });
/** Header-safe characters: printable ASCII and Latin-1, never CR or LF. */
const headerText = fc
  .array(fc.oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0x80, max: 0xff })), { maxLength: 80 })
  .map((codes) => String.fromCharCode(...codes));

/** Path pieces, from plain to hostile. */
const piece = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9._~-]{0,12}$/),
  text(12).map(encodeURIComponent),
  fc.constantFrom(
    '%', '%Z', '%ZZ', '%C3', '%C3%28', '%ED%A0%80', '%F4%90%80%80', '%00', '%01', '%7F', '%2F', '%2f', '%25',
    '%252F', '..', '%2E%2E', '.', '//', ';', '%3B', '?', '#', '%23', '+', '%20', 'é', '\u{1F600}', '\\',
  ),
  fc.integer({ min: 500, max: 3000 }).map((n) => 'k'.repeat(n)),
  fc.integer({ min: 100, max: 1000 }).map((n) => '%C3%A9'.repeat(n)),
);
const segment = fc.array(piece, { minLength: 1, maxLength: 4 }).map((parts) => parts.join(''));

const queryValue = fc.oneof(
  segment,
  fc.constantFrom('0', '1', '-1', '1000', '1001', '10001', '9007199254740993', '1e3', 'true', '', 'null'),
);
const query = fc
  .array(
    fc.oneof(
      fc.tuple(fc.constantFrom('prefix', 'limit', 'cursor', 'after', 'epoch', 'snapshot', 'x', 'limit[]'), queryValue),
      // A long poll holds the answer for `wait` seconds: keep it short.
      fc.tuple(fc.constant('wait'), fc.constantFrom('0', '1', '-1', '61', 'x')),
    ),
    { maxLength: 4 },
  )
  .map((pairs) => (pairs.length ? `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}` : ''));

const target = fc.oneof(
  { weight: 6, arbitrary: segment.map((key) => `/v1/keys/${key}`) },
  { weight: 2, arbitrary: query.map((q) => `/v1/keys${q}`) },
  { weight: 4, arbitrary: fc.constant('/v1/records') },
  {
    weight: 2,
    arbitrary: fc
      .tuple(
        fc.constantFrom('/v1/stats', '/healthz', '/readyz', '/metrics', '/v1/snapshot', '/v1/changes', '/v1/changes/stream', '/v1/admin/compact'),
        query,
      )
      .map(([path, q]) => path + q),
  },
  { weight: 2, arbitrary: fc.array(segment, { maxLength: 5 }).map((parts) => `/${parts.join('/')}`) },
  { weight: 1, arbitrary: fc.constantFrom('*', 'http://127.0.0.1/v1/stats', '/v1/keys/', '/v1//keys/a', '/V1/STATS', '') },
);

const method = fc.oneof(
  { weight: 10, arbitrary: fc.constantFrom('GET', 'PUT', 'POST', 'DELETE', 'HEAD') },
  { weight: 1, arbitrary: fc.constantFrom('PATCH', 'OPTIONS', 'TRACE', 'PROPFIND', 'FOO', 'get', 'G€T') },
);

const authorization = fc.oneof(
  { weight: 12, arbitrary: fc.constantFrom(...Object.values(TOKENS)).map((token) => `Bearer ${token}`) },
  { weight: 1, arbitrary: headerText.map((t) => `Bearer ${t}`) },
  { weight: 1, arbitrary: headerText },
);
const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constant('application/json') },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'application/json; charset=utf-8', 'APPLICATION/JSON', 'application/json; charset=latin1', 'text/plain',
      'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json;', '',
    ),
  },
  { weight: 1, arbitrary: headerText },
);
const header: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.tuple(fc.constantFrom('if-match', 'if-none-match'), fc.oneof(fc.constantFrom('*', '"1"', '1', 'W/"2"', '"x"', '"1", "2"', '"99999999999999999999"'), headerText)),
  fc.tuple(fc.constant('idempotency-key'), fc.oneof(fc.stringMatching(/^[!-~]{1,300}$/), headerText)),
  fc.tuple(fc.constantFrom('x-request-id', 'last-event-id', 'accept', 'accept-encoding', 'content-encoding', 'x-forwarded-for', 'origin'), headerText),
  fc.tuple(fc.constant('expect'), fc.constant('100-continue')),
  fc.tuple(fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/), headerText),
);

const jsonText = (value: fc.Arbitrary<unknown>) => value.map((v) => JSON.stringify(v));
const deep = fc.integer({ min: 1_000, max: 60_000 }).map((depth) => '['.repeat(depth) + ']'.repeat(depth));
const recordItem = fc.record(
  {
    key: fc.oneof(text(20), fc.constant('')),
    op: fc.constantFrom('set', 'delete', 'incr', 'other'),
    value: fc.jsonValue({ maxDepth: 3 }),
    by: fc.oneof(fc.double(), fc.integer(), fc.constant(9007199254740991)),
    ifOffset: fc.oneof(fc.nat(), fc.integer({ min: -5, max: -1 })),
    ifAbsent: fc.boolean(),
  },
  { requiredKeys: ['key'] },
);
const body = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  { weight: 3, arbitrary: fc.uint8Array({ maxLength: 512 }).map((bytes) => Buffer.from(bytes)) },
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 1 }).map((bytes) => Buffer.from(bytes)) },
  { weight: 3, arbitrary: jsonText(fc.jsonValue({ maxDepth: 4 })) },
  { weight: 6, arbitrary: jsonText(fc.record({ value: fc.jsonValue({ maxDepth: 4 }) })) },
  { weight: 6, arbitrary: jsonText(fc.record({ records: fc.array(recordItem, { maxLength: 12 }) })) },
  { weight: 1, arbitrary: deep },
  { weight: 1, arbitrary: deep.map((d) => `{"value":${d}}`) },
  { weight: 1, arbitrary: deep.map((d) => `{"records":[{"key":"deep","value":${d}}]}`) },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom([0xc3, 0x28], [0xff], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xc0, 0xaf], [0xe2, 0x82])
      .map((bad) => Buffer.concat([Buffer.from('{"value":"a'), Buffer.from(bad), Buffer.from('b"}')])),
  },
  {
    weight: 1,
    arbitrary: fc
      .constantFrom(MAX_VALUE_BYTES - 20, MAX_VALUE_BYTES + 10, 70_000, 200_000, 2_500_000)
      .map((size) => `{"value":"${'a'.repeat(size)}"}`),
  },
  { weight: 1, arbitrary: fc.constantFrom('{"__proto__":{"x":1},"value":1}', '{"value":1,"constructor":{"prototype":{"x":1}}}', '{"value":1}{"value":2}', 'null', '{"value":1,"value":2}') },
);

const request: fc.Arbitrary<RawRequest> = fc.record({
  method,
  target,
  // Mostly with a token and a JSON type, so that most requests get past the doors.
  headers: fc
    .tuple(fc.option(authorization, { freq: 8 }), fc.option(contentType, { freq: 4 }), fc.array(header, { maxLength: 4 }))
    .map(([auth, type, rest]) => [
      ...(auth === null ? [] : [['authorization', auth] as [string, string]]),
      ...(type === null ? [] : [['content-type', type] as [string, string]]),
      ...rest,
    ]),
  body: body.map((b) => (typeof b === 'string' ? Buffer.from(b, 'utf8') : b)),
  chunked: fc.boolean().map((b) => b && Math.random() < 0.2),
});

// --- a raw HTTP/1.1 exchange ---

function serialize(req: RawRequest): Buffer {
  const lines = [`${req.method} ${req.target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close'];
  for (const [name, value] of req.headers) lines.push(`${name}: ${value}`);
  lines.push(req.chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${req.body.length}`);
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  if (!req.chunked) return Buffer.concat([head, req.body]);
  const chunk = req.body.length ? Buffer.concat([Buffer.from(`${req.body.length.toString(16)}\r\n`), req.body, Buffer.from('\r\n')]) : Buffer.alloc(0);
  return Buffer.concat([head, chunk, Buffer.from('0\r\n\r\n')]);
}

/** The final (non-1xx) answer, parsed from what the server sent before closing. */
function parseAnswer(raw: Buffer): RawAnswer {
  let rest = raw;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) return { status: null, headers: {}, body: Buffer.alloc(0) };
    const [statusLine, ...headerLines] = rest.subarray(0, end).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '')?.[1] ?? NaN);
    rest = rest.subarray(end + 4);
    if (status >= 100 && status < 200) continue;
    const headers = Object.fromEntries(
      headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
    );
    return { status: Number.isNaN(status) ? null : status, headers, body: rest };
  }
}

/**
 * Sends the request and reads until the server closes (the request asks it to). An event
 * stream is cut by us as soon as its head is in, and any other answer still going after
 * `streamMs`. The request is sent without closing our side: Node ends a connection
 * whose client half-closes, abandoning a request still in progress, so a half-closing
 * client would miss the answer of every request that waits for the database.
 */
function exchange(port: number, req: RawRequest, streamMs = 1500, timeoutMs = 20_000): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1');
    const finish = () => {
      clearTimeout(hang);
      clearTimeout(streaming);
      socket.destroy();
      resolve(parseAnswer(Buffer.concat(chunks)));
    };
    let streaming: NodeJS.Timeout | undefined;
    const hang = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      const received = Buffer.concat(chunks);
      const head = received.subarray(0, received.indexOf('\r\n\r\n') + 1).toString('latin1');
      if (/^content-type: text\/event-stream/im.test(head)) finish();
      else streaming ??= setTimeout(finish, streamMs);
    });
    // The server may close before reading the whole body (a refused upload): what it
    // answered before closing is what counts.
    socket.on('error', () => {});
    socket.on('close', finish);
    socket.write(serialize(req));
  });
}

/** A failure report that stays readable when the request is megabytes long. */
function shortReport(details: fc.RunDetails<[RawRequest]>): void {
  if (!details.failed) return;
  const [req] = details.counterexample ?? [];
  const clip = (text: string) => (text.length > 300 ? `${text.slice(0, 300)}… (${text.length} chars)` : text);
  const shown = req && {
    method: req.method,
    target: clip(req.target),
    headers: req.headers.map(([name, value]) => `${name}: ${clip(value)}`),
    body: `${req.body.length} bytes: ${clip(JSON.stringify(req.body.subarray(0, 300).toString('latin1')))}`,
    chunked: req.chunked,
  };
  const cause = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance);
  throw new Error(`fuzz failed (FUZZ_SEED=${details.seed}): ${clip(cause)}\n${JSON.stringify(shown, null, 2)}`);
}

function peakRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

// --- the test ---

describe(`fuzzing the live server (${RUNS} requests)`, () => {
  const dir = tempDir();
  const prefix = `fixture-${randomUUID()}/`;
  const fixtures = new Map<string, unknown>([
    [`${prefix}plain`, 1],
    [`${prefix}unicode é 😀 / %2F`, { nested: ['a', null, true, 1.5] }],
    [`${prefix}string`, 'x'.repeat(MAX_VALUE_BYTES - 10)],
    [`${prefix}null`, null],
    ...Array.from({ length: 40 }, (_, i) => [`${prefix}n${i}`, { i }] as [string, unknown]),
  ]);
  let database: TestStore;
  let server: ListeningServer;
  const start = () =>
    startServer({
      ...database.env,
      STATELOG_TOKENS: `read:${TOKENS.read},write:${TOKENS.write},admin:${TOKENS.admin}`,
      STATELOG_MAX_VALUE_BYTES: String(MAX_VALUE_BYTES),
    });

  /** The fixtures as the server lists and reads them. */
  async function expectFixtures(): Promise<void> {
    const listed = await send(server.port, {
      method: 'GET',
      path: `/v1/keys?limit=1000&prefix=${encodeURIComponent(prefix)}`,
      headers: bearer(TOKENS.read),
    });
    const items = (listed.json as { items: { key: string; value: unknown }[] }).items;
    expect(new Map(items.map((item) => [item.key, item.value]))).toEqual(fixtures);
    for (const [key, value] of fixtures) {
      const res = await send(server.port, { method: 'GET', path: `/v1/keys/${encodeURIComponent(key)}`, headers: bearer(TOKENS.read) });
      expect(res.json).toMatchObject({ key, value });
    }
  }

  beforeAll(async () => {
    database = await testStore(dir);
    server = await start();
    for (const [key, value] of fixtures) {
      const res = await send(server.port, {
        method: 'PUT',
        path: `/v1/keys/${encodeURIComponent(key)}`,
        headers: { ...bearer(TOKENS.write), 'content-type': 'application/json' },
        body: JSON.stringify({ value }),
      });
      expect(res.status, key).toBe(200);
    }
  }, 60_000);

  afterAll(async () => {
    server?.proc.kill('SIGKILL');
    await database?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it(
    'answers every request below 500 with the contract body on errors, and keeps the data',
    async () => {
      const seen = new Map<number, number>();
      await fc.assert(
        fc.asyncProperty(request, async (req) => {
          const answer = await exchange(server.port, req);
          if (answer.status === null) {
            // The server refused a large upload and closed: the rest of our upload made the
            // kernel reset the connection, which may discard the answer unread.
            expect(req.body.length, 'the server answered').toBeGreaterThan(64 * 1024);
            return;
          }
          const status = answer.status;
          seen.set(status, (seen.get(status) ?? 0) + 1);
          expect(status).toBeLessThan(500);
          const length = Number(answer.headers['content-length'] ?? -1);
          if (status >= 400 && req.method !== 'HEAD' && length > 0 && answer.body.length >= length) {
            const error = JSON.parse(answer.body.subarray(0, length).toString('utf8')) as { error?: { code?: unknown; message?: unknown } };
            expect(error.error?.code, 'error code').toMatch(/^[a-z_]+$/);
            expect(typeof error.error?.message).toBe('string');
          }
          expect(server.proc.exitCode, 'the server is still running').toBeNull();
        }),
        { numRuns: RUNS, endOnFailure: true, reporter: shortReport, ...(SEED ? { seed: SEED } : {}) },
      );
      // The fuzzing reached the handlers, not only the doors.
      expect(seen.get(200) ?? 0).toBeGreaterThan(RUNS / 100);
      expect(seen.get(400) ?? 0).toBeGreaterThan(RUNS / 50);

      expect(peakRss(server.proc.pid!)).toBeLessThan(MAX_RSS_BYTES);

      await expectFixtures();
      expect(await server.stop()).toEqual({ code: 0, signal: null });
      if (database.kind === 'sqlite') {
        const db = new Database(database.env.STATELOG_DB!, { readonly: true });
        try {
          expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
        } finally {
          db.close();
        }
      }
      // What the database kept, read back by a server started afresh on it.
      server = await start();
      await expectFixtures();
    },
    Math.max(120_000, RUNS * 60),
  );
});
