// One process of the load generator (bench/shared/load.ts): autocannon's closed loop over this
// process's share of the connections, its settings from the parent by IPC. Plain
// JavaScript, started by plain node, like the autocannon command line it is held to. Each connection sends its own random draw of the pre-built
// requests (autocannon builds each request's bytes once, as its CLI does), and every
// answer's latency is recorded in microseconds (autocannon's own histogram keeps whole
// milliseconds, too coarse for p99 ratios of a few milliseconds).
import autocannon from 'autocannon';
import hdr from 'hdr-histogram-js';

/** @type {{ url: string, connections: number, seconds: number, timeout: number, rate: number | null, requests: { method: string, path: string, body?: string, headers?: Record<string, string> }[] }} */
const { url, connections, seconds, timeout, rate, requests } = await new Promise((resolve) => process.once('message', resolve));

const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
const prepared = requests.map((r) => {
  const headers = { ...(r.body === undefined ? {} : { 'content-type': 'application/json' }), ...r.headers };
  return { method: r.method, path: r.path, ...(r.body === undefined ? {} : { body: r.body }), ...(Object.keys(headers).length > 0 ? { headers } : {}) };
});

/**
 * A connection's own requests: PER_CONNECTION drawn at random from the pre-built ones, so
 * that no two connections send the same keys in step. Few enough that their bytes stay
 * in the CPU's caches, as the one request of the autocannon command line does.
 */
const PER_CONNECTION = 64;
function drawn(list) {
  return Array.from({ length: Math.min(PER_CONNECTION, list.length) }, () => ({ ...list[Math.floor(Math.random() * list.length)] }));
}

let ok = 0;
let firstFailure = null;
const cpuAtStart = process.cpuUsage();
const instance = autocannon(
  {
    url,
    connections,
    duration: seconds,
    timeout,
    ...(rate === null ? {} : { overallRate: Math.max(1, Math.round(rate)) }),
    requests: prepared.slice(0, 1),
    setupClient: (client) => client.setRequests(drawn(prepared)),
  },
  (err, result) => {
    if (err) throw err;
    const cpu = process.cpuUsage(cpuAtStart);
    process.send({
      ok,
      // Seconds from the first connection to the end, as autocannon measures its rate.
      elapsed: result.duration,
      histogram: hdr.encodeIntoCompressedBase64(histogram),
      errors: result.errors + result.timeouts,
      non2xx: result.non2xx,
      firstFailure,
      // This process's CPU over the run: whether the generator, too, was short of a core.
      cpuSeconds: (cpu.user + cpu.system) / 1e6,
    });
    process.disconnect();
  },
);
instance.on('response', (_client, status, _bytes, ms) => {
  if (status >= 200 && status < 300) {
    ok++;
    histogram.recordValue(Math.max(1, Math.round(ms * 1000)));
  } else firstFailure ??= `status ${status}`;
});
instance.on('reqError', (err) => (firstFailure ??= err.message));
