// The long-poll followers' baseline (bench/reads/followers.ts): the least a server can do to
// answer followers at the head on this machine. It keeps records in memory and fsyncs
// nothing: PUT /v1/keys/:key appends a record, and every waiting GET /v1/changes is
// answered at once with the page after its position, each distinct page encoded once,
// in statelog's page format with its Link. What statelog adds on top of this
// (durability, the HTTP framework, its hooks) is the difference.
import http from 'node:http';
import { listenBare } from '../shared/listen-bare.js';

const WAIT_LIMIT_MS = 30_000;
const PAGE = 1000;
const records: string[] = [];
const waiting = new Map<number, Set<http.ServerResponse>>();

/** The page after `after`, as statelog answers it, with the URL to ask next. */
function page(after: number): { body: string; link: string } {
  const slice = records.slice(after, after + PAGE);
  const next = after + slice.length;
  return {
    body: `{"records":[${slice.join(',')}],"next":${next},"head":${records.length},"epoch":"bare"}`,
    link: `</v1/changes?after=${next}&epoch=bare&wait=30>; rel="next"`,
  };
}

function answer(res: http.ServerResponse, { body, link }: { body: string; link: string }): void {
  res.writeHead(200, { 'content-type': 'application/json', link });
  res.end(body);
}

function append(key: string, value: string): number {
  const offset = records.length + 1;
  records.push(`{"offset":${offset},"key":${JSON.stringify(key)},"op":"set","value":${value},"ts":${Date.now()}}`);
  for (const [after, responses] of waiting) {
    const text = page(after);
    for (const res of responses) answer(res, text);
  }
  waiting.clear();
  return offset;
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://bare');
  if (req.method === 'PUT' && url.pathname.startsWith('/v1/keys/')) {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const offset = append(decodeURIComponent(url.pathname.slice('/v1/keys/'.length)), JSON.stringify((JSON.parse(body) as { value: unknown }).value));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"offset":${offset}}`);
    });
    return;
  }
  if (req.method === 'GET' && url.pathname === '/v1/changes') {
    const after = Number(url.searchParams.get('after') ?? 0);
    if (after < records.length) return answer(res, page(after));
    let responses = waiting.get(after);
    if (!responses) waiting.set(after, (responses = new Set()));
    responses.add(res);
    const timer = setTimeout(() => {
      responses.delete(res);
      answer(res, page(after));
    }, WAIT_LIMIT_MS);
    res.on('close', () => {
      clearTimeout(timer);
      responses.delete(res);
    });
    return;
  }
  res.writeHead(404).end();
});

listenBare(server);
