// One process of long-poll followers for bench/reads/followers.ts: each starts at `after`,
// asks the URL the last page names (`Link: rel="next"`; `after=next` from a server that
// sends none) and notes, for every record, the delay from its commit (its ts) to the
// answer's arrival, in 1 ms buckets. Plain JavaScript, so that the followers cost the
// two cores as little as they can.
import http from 'node:http';

const [base, countText, afterText, waitText] = process.argv.slice(2);
const count = Number(countText);
const wait = Number(waitText);
const BUCKETS = 10_000;
const histogram = new Array(BUCKETS + 1).fill(0);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
let requests = 0;
let received = 0;
let failures = 0;
let stopped = false;
const positions = new Array(count).fill(Number(afterText));

function get(path) {
  return new Promise((resolve, reject) => {
    http
      .get(`${base}${path}`, { agent }, (res) => {
        const chunks = [];
        res.on('data', (chunk) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode, link: res.headers.link, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

async function follow(index) {
  let path = `/v1/changes?after=${positions[index]}&wait=${wait}`;
  while (!stopped) {
    let answer;
    try {
      answer = await get(path);
    } catch {
      failures++;
      await new Promise((resolve) => setTimeout(resolve, 100));
      continue;
    }
    requests++;
    const arrived = Date.now();
    if (answer.status !== 200) {
      failures++;
      await new Promise((resolve) => setTimeout(resolve, 100));
      continue;
    }
    const page = JSON.parse(answer.body);
    for (const record of page.records) {
      if (record.offset <= positions[index]) throw new Error(`record ${record.offset} again after ${positions[index]}`);
      positions[index] = record.offset;
      received++;
      histogram[Math.min(BUCKETS, Math.max(0, arrived - record.ts))]++;
    }
    positions[index] = Math.max(positions[index], page.next);
    const link = /^<([^>]+)>; rel="next"$/.exec(answer.link ?? '');
    path = link ? link[1] : `/v1/changes?after=${page.next}&epoch=${page.epoch}&wait=${wait}`;
  }
}

const running = Array.from({ length: count }, (_, i) => follow(i));
process.send({ type: 'ready' });
process.on('message', (message) => {
  if (message.type === 'progress') process.send({ type: 'progress', lowest: Math.min(...positions) });
  if (message.type === 'report') {
    stopped = true;
    const usage = process.cpuUsage();
    process.send({ type: 'report', histogram, requests, received, failures, cpuSeconds: (usage.user + usage.system) / 1e6 });
    agent.destroy();
    void Promise.allSettled(running).then(() => process.exit(0));
    setTimeout(() => process.exit(0), 200).unref();
  }
});
