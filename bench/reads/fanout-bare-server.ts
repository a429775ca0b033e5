// The fan-out bench's baseline: the least a server can do to relay records to SSE
// subscribers on this machine. It stores nothing and fsyncs nothing: POST /v1/records
// (and PUT /v1/keys/:key, one record) stamps each record with an offset and the time,
// and writes the events to every open GET /v1/changes/stream at once, in statelog's own
// event format. What statelog adds on top of this (durability, reading the log, the HTTP
// framework) is the difference.
import http from 'node:http';
import { listenBare } from '../shared/listen-bare.js';

let head = 0;
const streams = new Set<http.ServerResponse>();

function relay(body: string): number {
  const { records } = JSON.parse(body) as { records: { key: string; value: unknown }[] };
  const ts = Date.now();
  let events = '';
  for (const record of records) {
    head += 1;
    const data = `{"offset":${head},"key":${JSON.stringify(record.key)},"op":"set","value":${JSON.stringify(record.value)},"ts":${ts}}`;
    events += `id: ${head}\nevent: record\ndata: ${data}\n\n`;
  }
  for (const stream of streams) stream.write(events);
  return head;
}

const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/v1/records') {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"offset":${relay(body)}}`);
    });
    return;
  }
  if (req.method === 'PUT' && req.url?.startsWith('/v1/keys/')) {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const key = decodeURIComponent(req.url!.slice('/v1/keys/'.length));
      const { value } = JSON.parse(body) as { value: unknown };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"offset":${relay(JSON.stringify({ records: [{ key, value }] }))}}`);
    });
    return;
  }
  if (req.method === 'GET' && req.url?.startsWith('/v1/changes/stream')) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
    res.write(': bare relay\n\n');
    streams.add(res);
    res.on('close', () => streams.delete(res));
    return;
  }
  res.writeHead(404).end();
});

listenBare(server);
