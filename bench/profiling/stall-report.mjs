// Sums a timeline written by bench/profiling/stall-trace.mjs: each kind's count and mean by time bin,
// and for the requests slower than a threshold, which traced event overlapped each most.
//   node bench/profiling/stall-report.mjs /tmp/trace/stall-trace-<pid>.log [--bin 10] [--slow 30]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { bin: { type: 'string', default: '10' }, slow: { type: 'string', default: '30' } },
});
const binMs = Number(values.bin) * 1000;
const slowMs = Number(values.slow);
const events = readFileSync(positionals[0], 'utf8')
  .trim()
  .split('\n')
  .map((line) => {
    const [end, kind, ms, ...detail] = line.split(' ');
    return { end: Number(end), kind, ms: Number(ms), detail: detail.join(' ') };
  });
const kinds = [...new Set(events.map((e) => e.kind))];
const start = events[0].end - events[0].ms;

const bins = new Map();
for (const e of events) {
  const bin = Math.floor((e.end - start) / binMs);
  if (!bins.has(bin)) bins.set(bin, new Map());
  const row = bins.get(bin);
  const [n, sum] = row.get(e.kind) ?? [0, 0];
  row.set(e.kind, [n + 1, sum + e.ms]);
}
console.log(`count/mean ms by ${values.bin} s bin`);
console.log('t (s)'.padStart(6) + kinds.map((k) => k.padStart(16)).join(''));
for (const [bin, row] of [...bins].sort((a, b) => a[0] - b[0])) {
  const cells = kinds.map((k) => (row.has(k) ? `${row.get(k)[0]}/${(row.get(k)[1] / row.get(k)[0]).toFixed(1)}` : '-').padStart(16));
  console.log(String((bin * binMs) / 1000).padStart(6) + cells.join(''));
}

const others = events.filter((e) => e.kind !== 'slow-request');
const cause = new Map();
const slow = events.filter((e) => e.kind === 'slow-request' && e.ms >= slowMs);
for (const request of slow) {
  const from = request.end - request.ms;
  let best = 'nothing traced';
  let bestMs = 0;
  for (const e of others) {
    const overlap = Math.min(e.end, request.end) - Math.max(e.end - e.ms, from);
    if (overlap > bestMs) [best, bestMs] = [e.kind, overlap];
  }
  cause.set(best, (cause.get(best) ?? 0) + 1);
}
console.log(`\n${slow.length} requests of ${slowMs} ms or more; the traced event that overlapped each most:`);
for (const [kind, n] of [...cause].sort((a, b) => b[1] - a[1])) console.log(`  ${kind}: ${n}`);
