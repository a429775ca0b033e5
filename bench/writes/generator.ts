// Is the load generator the bottleneck? The suite's generator (bench/shared/load.ts) and the
// autocannon command line (one process, the reference) take turns on the bare fastify
// PUT route (bench/writes/bare-server.ts), c = 50: the generator must reach at least 95 % of
// the command line's rate in the same run, or every ratio to the bare route measures
// the client instead of the machine.
//   npm run bench -- --only generator
import { alternate, ratios, type Figure } from '../shared/figure.js';
import { startBare } from '../shared/lib.js';
import { autocannonCli, generatorThreads, load, prebuilt } from '../shared/load.js';
import { pairedSettings, putRequest } from './write.js';

export const generatorFigure: Figure = {
  name: 'generator',
  title: 'The load generator against the autocannon command line, bare fastify PUT route, c = 50',
  async run(asked) {
    const settings = pairedSettings(asked);
    const connections = 50;
    const threads = generatorThreads(connections);
    const requests = prebuilt(putRequest);
    const bare = await startBare();
    let command = '';
    try {
      const sides = {
        generator: () => load({ url: bare.url, connections, seconds: settings.seconds, requests, threads }),
        'autocannon CLI': async () => {
          const result = await autocannonCli(bare.url, connections, settings.seconds, putRequest());
          command = result.command;
          return result;
        },
      };
      await load({ url: bare.url, connections, seconds: settings.warmupSeconds, requests, threads });
      const runs = await alternate(settings.rounds, ['generator', 'autocannon CLI'] as const, async (side, round) => {
        const result = await sides[side]();
        settings.log(`round ${round + 1}: ${side} ${result.rps.toFixed(0)} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms`);
        return result;
      });
      const pick = (side: keyof typeof runs, field: 'rps' | 'p99') => runs[side].map((r) => r[field]);
      return {
        scale: `${connections} connections, ${settings.seconds} s a side a round; the generator: autocannon in ${threads} process(es), random keys of 10,000`,
        settings: { connections, seconds: settings.seconds, rounds: settings.rounds, threads, reference: command, failedRequests: [...runs.generator, ...runs['autocannon CLI']].reduce((n, r) => n + r.errors, 0) },
        metrics: [
          { label: 'generator on the bare route', unit: 'req/s', values: pick('generator', 'rps') },
          { label: 'autocannon CLI on the bare route', unit: 'req/s', values: pick('autocannon CLI', 'rps') },
          { label: 'ratio generator / autocannon CLI (req/s)', unit: '×', values: ratios(pick('generator', 'rps'), pick('autocannon CLI', 'rps')), target: { op: '>=', value: 0.95 } },
          { label: 'generator p99', unit: 'ms', values: pick('generator', 'p99') },
          // autocannon keeps whole milliseconds: its p99 is shown, not compared.
          { label: 'autocannon CLI p99 (whole ms)', unit: 'ms', values: pick('autocannon CLI', 'p99') },
        ],
        notes: [`The reference command, each round: \`${command.replace(/http:\/\/127\.0\.0\.1:\d+/, 'http://127.0.0.1:PORT')}\`.`],
        details: runs,
      };
    } finally {
      await bare.stop();
    }
  },
};
