// One process of SSE subscribers for bench/reads/fanout.ts: opens its share of streams, and
// for every record event notes the delay from the record's commit time (its ts) to
// the arrival of the chunk that carried it, in a histogram of 0.1 ms buckets: one for
// the warm-up's records, one for those after it (bench/reads/fanout.ts says where it ends).
// Plain JavaScript on Buffers: the subscribers share two cores with the server, and
// what they spend decoding text and loading a TypeScript loader is taken from it.
import http from 'node:http';

const [base, countText] = process.argv.slice(2);
const BUCKETS = 10_000; // up to 1 s; later goes in the last bucket
const ID = Buffer.from('id: ');
const RECORD = Buffer.from('\nevent: record\n');
const TS = Buffer.from('"ts":');
const NEWLINE = 0x0a;

const histogram = new Array(BUCKETS + 1).fill(0);
const warmup = new Array(BUCKETS + 1).fill(0);
/** The warm-up's last record: every record up to here goes in `warmup`. */
let warmupHead = Infinity;
let received = 0;
let chunks = 0;
/** @type {{ rest: Buffer | null, last: number }[]} */
const streams = [];

/** The decimal number whose digits start at `at`. */
function numberAt(bytes, at) {
  let value = 0;
  for (let code = bytes[at]; code >= 0x30 && code <= 0x39; code = bytes[++at]) value = value * 10 + (code - 0x30);
  return value;
}

/**
 * Scans a chunk's complete events for record ids and commit times with indexOf rather
 * than decoding and splitting it: a hundred streams of 2,000 events/s share this machine
 * with the server, and the client must not be what is measured.
 */
function onChunk(stream, chunk, arrived) {
  chunks += 1;
  const bytes = stream.rest === null ? chunk : Buffer.concat([stream.rest, chunk]);
  // Up to the end of the last complete event; none yet when an event is split (-1).
  const lastEnd = bytes.lastIndexOf('\n\n');
  const complete = lastEnd < 0 ? 0 : lastEnd + 2;
  stream.rest = complete < bytes.length ? Buffer.from(bytes.subarray(complete)) : null;
  for (let at = bytes.indexOf(ID); at >= 0 && at < complete; at = bytes.indexOf(ID, at + ID.length)) {
    const lineEnd = bytes.indexOf(NEWLINE, at);
    if (bytes.compare(RECORD, 0, RECORD.length, lineEnd, lineEnd + RECORD.length) !== 0) continue;
    const offset = numberAt(bytes, at + ID.length);
    if (offset !== stream.last + 1 && stream.last !== 0) throw new Error(`offset ${offset} after ${stream.last}`);
    stream.last = offset;
    // A record's data ends with "ts":<n>}
    const next = bytes.indexOf('\n\n', lineEnd);
    const ts = numberAt(bytes, bytes.lastIndexOf(TS, next) + TS.length);
    (offset <= warmupHead ? warmup : histogram)[Math.min(BUCKETS, Math.max(0, Math.floor((arrived - ts) * 10)))] += 1;
    received += 1;
  }
}

function open() {
  return new Promise((resolve, reject) => {
    const stream = { rest: null, last: 0 };
    streams.push(stream);
    http
      .get(`${base}/v1/changes/stream?after=0`, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`));
        // Epoch milliseconds with a fraction; ts is whole milliseconds, so delays read up to 1 ms long.
        res.on('data', (chunk) => onChunk(stream, chunk, performance.timeOrigin + performance.now()));
        resolve();
      })
      .on('error', reject);
  });
}

await Promise.all(Array.from({ length: Number(countText) }, open));
// CPU from here on (from the warm-up's end once told): what receiving costs, without
// start-up and connecting.
let atReady = process.cpuUsage();
process.send({ type: 'ready' });
process.on('message', (message) => {
  if (message.type === 'warmed-up') {
    warmupHead = message.head;
    atReady = process.cpuUsage();
    process.send({ type: 'warmed-up' });
  }
  if (message.type === 'progress') process.send({ type: 'progress', received, lowest: Math.min(...streams.map((s) => s.last)) });
  if (message.type === 'report') {
    const cpu = process.cpuUsage(atReady);
    process.send({ type: 'report', histogram, warmup, received, chunks, cpuSeconds: (cpu.user + cpu.system) / 1e6 });
    process.exit(0);
  }
});
