// Plain GETs while 300 filtered long polls catch up (npm run bench -- --only filtered-polls):
// a server on a log of 30,000 records; POLLERS readers (in child processes, so that their
// parsing is not the server's) long-poll with a prefix that matches nothing, from offset
// 0, following `next` to the head; a writer commits a record of another key every
// WRITE_MS (each commit wakes every waiting poll); meanwhile a probe GETs one key every
// 10 ms on its own keep-alive connection. Reports the probe's p50/p99/max per round (a fresh server each).
// Target: p99 <= 250 ms.
// Options (environment): POLLERS, RECORDS, WRITE_MS.
import { fork, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import type { Figure } from '../shared/figure.js';
import { filledTemplate, percentile, round, sleep, startStatelog, workingCopy } from '../shared/lib.js';

const PROCS = 2;
const WRITE_MS = Number(process.env.WRITE_MS ?? 50);

function put(agent: http.Agent, url: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: 'PUT', agent, headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    request.on('error', reject);
    request.end(body);
  });
}

interface Stopped {
  answered: number;
  refused: number;
  atHead: number;
}

function startPollers(base: string, count: number): ChildProcess {
  return fork(fileURLToPath(new URL('./filtered-poller.ts', import.meta.url)), [base, String(count), 'nothing/'], {
    execArgv: ['--import', 'tsx'],
  });
}

function next<T>(child: ChildProcess, type: string): Promise<T> {
  return new Promise((resolve) => {
    const listen = (message: { type: string }): void => {
      if (message.type !== type) return;
      child.off('message', listen);
      resolve(message as T);
    };
    child.on('message', listen);
  });
}

function probe(agent: http.Agent, url: string): Promise<{ ms: number; status: number }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        res.resume();
        res.on('end', () => resolve({ ms: performance.now() - started, status: res.statusCode! }));
      })
      .on('error', reject);
  });
}

export const filteredPollsFigure: Figure = {
  name: 'filtered-polls',
  title: 'GET p99 while 300 filtered long polls catch up from offset 0 over 30,000 records, under writes',
  async run(settings) {
    const pollers = Number(process.env.POLLERS ?? (settings.smoke ? 30 : 300));
    const records = Number(process.env.RECORDS ?? (settings.smoke ? 3000 : 30_000));
    const template = filledTemplate(records, Math.max(1, records / 6), settings.log);
    const p50: number[] = [];
    const p99: number[] = [];
    const max: number[] = [];
    const details: unknown[] = [];
    for (let roundIndex = 0; roundIndex < settings.rounds; roundIndex++) {
      const copy = workingCopy(template, 'filtered-polls');
      const server = await startStatelog({ STATELOG_DB: copy.path, STATELOG_SYNC: 'normal' }, { output: 'discard' });
      const agent = new http.Agent({ keepAlive: true });
      try {
        const url = `${server.url}/v1/keys/key-000001`;
        await probe(agent, url);
        const shares = Array.from({ length: PROCS }, (_, i) => Math.floor((pollers + i) / PROCS));
        const children = shares.map((share) => startPollers(server.url, share));
        await Promise.all(children.map((child) => next(child, 'started')));
        const writerAgent = new http.Agent({ keepAlive: true });
        let writing = true;
        let writes = 0;
        const writer = (async () => {
          while (writing) {
            await put(writerAgent, `${server.url}/v1/keys/other%2F${writes % 100}`, `{"value":${writes}}`);
            writes += 1;
            await sleep(WRITE_MS);
          }
        })();
        const samples: { ms: number; status: number }[] = [];
        const until = performance.now() + settings.seconds * 1000;
        while (performance.now() < until) {
          samples.push(await probe(agent, url));
          await sleep(10);
        }
        writing = false;
        await writer;
        writerAgent.destroy();
        const stopped = await Promise.all(
          children.map((child) => {
            const done = next<Stopped>(child, 'stopped');
            child.send({ type: 'stop' });
            return done;
          }),
        );
        const ms = samples.map((s) => s.ms);
        p50.push(round(percentile(ms, 50)));
        p99.push(round(percentile(ms, 99)));
        max.push(round(Math.max(...ms)));
        const sum = (key: keyof Stopped) => stopped.reduce((total, s) => total + s[key], 0);
        const round_ = { writes, probes: samples.length, failedProbes: samples.filter((s) => s.status !== 200).length, polls: sum('answered'), refusedPolls: sum('refused'), caughtUp: sum('atHead') };
        details.push(round_);
        settings.log(`round ${roundIndex + 1}: GET p50 ${p50.at(-1)} ms, p99 ${p99.at(-1)} ms, max ${max.at(-1)} ms; ${JSON.stringify(round_)}`);
      } finally {
        agent.destroy();
        await server.stop();
        copy.dispose();
      }
    }
    return {
      scale: `${pollers} long polls (prefix matching nothing, from offset 0) over ${records.toLocaleString()} records, a write every ${WRITE_MS} ms, a GET every 10 ms for ${settings.seconds} s a round`,
      settings: { pollers, records, writeMs: WRITE_MS, seconds: settings.seconds, rounds: settings.rounds },
      metrics: [
        { label: 'GET p99 under filtered long polls', unit: 'ms', values: p99, target: { op: '<=', value: 250 } },
        { label: 'GET p50 under filtered long polls', unit: 'ms', values: p50 },
        { label: 'GET max under filtered long polls', unit: 'ms', values: max },
      ],
      details,
    };
  },
};
