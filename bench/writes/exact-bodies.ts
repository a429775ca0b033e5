// GET p99 while number-heavy bodies arrive: 2 connections send `POST /v1/records` bodies
// of 8 MiB (1 MiB with --smoke) whose values are arrays of `1.0`, a number kept as
// written, in a closed loop, while 10 connections GET one key; against the same GETs
// with nothing else arriving. The server takes values up to 2 MiB, so the bodies pass
// its size limit and meet the bound on bodies parsed losslessly (answered 413).
//   npm run bench -- --only exact-bodies
import { closedLoop, HttpClient, httpLoad, type LoopResult } from '../shared/closed-loop.js';
import type { Figure } from '../shared/figure.js';
import { httpJson, startStatelog } from '../shared/lib.js';

const READERS = 10;
const SENDERS = 2;

/** A batch body of about `bytes` whose 1000 values are arrays of 1.0. */
function heavyBody(bytes: number): string {
  const numbers = Math.max(1, Math.floor(bytes / 1000 / 4));
  const value = `[${Array(numbers).fill('1.0').join(',')}]`;
  return `{"records":[${Array.from({ length: 1000 }, (_, i) => `{"key":"heavy/${i}","value":${value}}`).join(',')}]}`;
}

export const exactBodiesFigure: Figure = {
  name: 'exact-bodies',
  title: 'GET p99 while 8 MiB number-heavy batches arrive',
  async run(settings) {
    const bodyBytes = settings.smoke ? 1024 * 1024 : 8 * 1024 * 1024;
    const body = heavyBody(bodyBytes);
    const server = await startStatelog({ STATELOG_MAX_VALUE_BYTES: String(2 * 1024 * 1024) });
    const idle: LoopResult[] = [];
    const loaded: LoopResult[] = [];
    const senders: LoopResult[] = [];
    const statuses = new Map<number, number>();
    const get = () => ({ method: 'GET' as const, path: '/v1/keys/read-me' });
    try {
      await httpJson('PUT', `${server.url}/v1/keys/read-me`, { value: { n: 1 } });
      await httpLoad(server.url, READERS, settings.warmupSeconds, get);
      for (let round = 0; round < settings.rounds; round++) {
        idle.push(await httpLoad(server.url, READERS, settings.seconds, get));
        const client = new HttpClient(server.url, SENDERS);
        try {
          const sending = closedLoop(SENDERS, settings.seconds, async () => {
            const { status } = await client.send({ method: 'POST', path: '/v1/records', body });
            statuses.set(status, (statuses.get(status) ?? 0) + 1);
          });
          loaded.push(await httpLoad(server.url, READERS, settings.seconds, get));
          senders.push(await sending);
        } finally {
          await client.close();
        }
        settings.log(
          `round ${round + 1}: GET p99 idle ${idle[round]!.p99.toFixed(1)} ms, while ${(body.length / 1048576).toFixed(1)} MiB bodies arrive ${loaded[round]!.p99.toFixed(1)} ms (${senders[round]!.requests} bodies, p50 ${senders[round]!.p50.toFixed(0)} ms each)`,
        );
      }
    } finally {
      await server.stop();
    }
    return {
      scale: `${(body.length / 1048576).toFixed(1)} MiB batches of 1.0 values on ${SENDERS} connections, GETs on ${READERS}, ${settings.seconds} s a side`,
      settings: { bodyBytes: body.length, senders: SENDERS, readers: READERS, seconds: settings.seconds, rounds: settings.rounds },
      metrics: [
        { label: 'GET p99 idle', unit: 'ms', values: idle.map((r) => r.p99) },
        { label: 'GET p99 while number-heavy bodies arrive', unit: 'ms', values: loaded.map((r) => r.p99) },
        { label: 'number-heavy body answered in (p50)', unit: 'ms', values: senders.map((r) => r.p50) },
      ],
      details: { idle, loaded, senders, statuses: Object.fromEntries(statuses) },
    };
  },
};
