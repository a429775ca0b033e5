// GET of a key against a bare fastify GET that returns a constant, measured alternately
// in one run. statelog holds PUT_KEYS keys, written before the first round.
//   npm run bench -- --only read
import type { Figure } from '../shared/figure.js';
import { HttpClient } from '../shared/closed-loop.js';
import { PUT_KEYS, failedRequests, pairedSettings, randomKey, randomValue, versusBare, versusBareMetrics } from '../writes/write.js';

/** Sets key user_0 .. user_{count-1} in batches of 1,000 (the most one batch holds). */
export async function fillKeys(url: string, count: number): Promise<void> {
  const client = new HttpClient(url, 1);
  try {
    for (let from = 0; from < count; from += 1000) {
      const records = Array.from({ length: Math.min(1000, count - from) }, (_, i) => `{"key":"user_${from + i}","value":${randomValue()}}`);
      await client.expectOk({ method: 'POST', path: '/v1/records', body: `{"records":[${records.join(',')}]}` });
    }
  } finally {
    await client.close();
  }
}

export const readFigure: Figure = {
  name: 'read',
  title: 'GET of a key, c = 50, against a bare fastify GET returning a constant',
  async run(asked) {
    const settings = pairedSettings(asked);
    const connections = 50;
    const runs = await versusBare(settings, connections, () => ({ method: 'GET', path: `/v1/keys/${randomKey()}` }), (statelog) => fillKeys(statelog.url, PUT_KEYS));
    return {
      scale: `${connections} connections, ${settings.seconds} s a side a round, random keys of ${PUT_KEYS.toLocaleString()} set ones`,
      settings: { connections, seconds: settings.seconds, rounds: settings.rounds, keys: PUT_KEYS, failedRequests: failedRequests(runs) },
      metrics: versusBareMetrics('GET', runs, 0.7),
      details: runs,
    };
  },
};
