// One process of SSE subscribers for bench/fanout.ts: opens its share of streams, and
// for every record event notes the delay from the record's commit time (its ts) to
// the arrival of the chunk that carried it, in a histogram of 0.1 ms buckets.
import http from 'node:http';

const [base, countText] = process.argv.slice(2) as [string, string];
const BUCKETS = 10_000; // up to 1 s; later goes in the last bucket

interface Stream {
  buffer: string;
  last: number;
}

const histogram = new Array<number>(BUCKETS + 1).fill(0);
let received = 0;
const streams: Stream[] = [];

/**
 * Scans a chunk's complete events for record ids and commit times with indexOf rather
 * than splitting it into events: a hundred streams of 2,000 events/s share this machine
 * with the server, and the client must not be what is measured.
 */
function onChunk(stream: Stream, chunk: string, arrived: number): void {
  const text = stream.buffer + chunk;
  const complete = text.lastIndexOf('\n\n') + 2;
  stream.buffer = text.slice(complete);
  for (let at = text.indexOf('id: '); at >= 0 && at < complete; at = text.indexOf('id: ', at + 4)) {
    const next = text.indexOf('\n\n', at);
    const isRecord = text.startsWith('event: record', text.indexOf('\n', at) + 1);
    if (!isRecord) continue;
    const offset = Number(text.slice(at + 4, text.indexOf('\n', at)));
    if (offset !== stream.last + 1 && stream.last !== 0) throw new Error(`offset ${offset} after ${stream.last}`);
    stream.last = offset;
    // recordJson ends with "ts":<n>}
    const tsAt = text.lastIndexOf('"ts":', next) + 5;
    const ts = Number(text.slice(tsAt, text.indexOf('}', tsAt)));
    histogram[Math.min(BUCKETS, Math.max(0, Math.floor((arrived - ts) * 10)))]! += 1;
    received += 1;
  }
}

function open(): Promise<void> {
  return new Promise((resolve, reject) => {
    const stream: Stream = { buffer: '', last: 0 };
    streams.push(stream);
    http
      .get(`${base}/v1/changes/stream?after=0`, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`));
        res.setEncoding('utf8');
        // Epoch milliseconds with a fraction; ts is whole milliseconds, so delays read up to 1 ms long.
        res.on('data', (chunk: string) => onChunk(stream, chunk, performance.timeOrigin + performance.now()));
        resolve();
      })
      .on('error', reject);
  });
}

await Promise.all(Array.from({ length: Number(countText) }, open));
process.send!({ type: 'ready' });
process.on('message', (message: { type: string }) => {
  if (message.type === 'progress') process.send!({ type: 'progress', received, lowest: Math.min(...streams.map((s) => s.last)) });
  if (message.type === 'report') {
    const cpu = process.cpuUsage();
    process.send!({ type: 'report', histogram, received, cpuSeconds: (cpu.user + cpu.system) / 1e6 });
    process.exit(0);
  }
});
