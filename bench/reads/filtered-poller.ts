// One process of filtered long pollers for bench/reads/filtered-polls.ts: COUNT readers, each
// following `next` from offset 0 with a prefix that matches nothing, as a client
// catching up would, then waiting at the head. Reports how many polls were answered and
// how many were refused when told to stop.
import http from 'node:http';

const [base, countText, prefix] = process.argv.slice(2) as [string, string, string];
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
let stopped = false;
let answered = 0;
let refused = 0;
let atHead = 0;

function get(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

async function reader(): Promise<void> {
  let after = 0;
  let caughtUp = false;
  while (!stopped) {
    const answer = await get(`${base}/v1/changes?after=${after}&prefix=${encodeURIComponent(prefix)}&wait=30`).catch(() => null);
    if (!answer || stopped) return;
    answered += 1;
    if (answer.status !== 200) {
      refused += 1;
      await new Promise((resolve) => setTimeout(resolve, 200));
      continue;
    }
    const page = JSON.parse(answer.body) as { next: number; head: number };
    after = page.next;
    if (!caughtUp && page.next + 2000 >= page.head) {
      caughtUp = true;
      atHead += 1;
    }
  }
}

for (let i = 0; i < Number(countText); i++) void reader();
process.send?.({ type: 'started' });
process.on('message', (message: { type: string }) => {
  if (message.type !== 'stop') return;
  stopped = true;
  process.send?.({ type: 'stopped', answered, refused, atHead });
  agent.destroy();
  setTimeout(() => process.exit(0), 50).unref();
});
