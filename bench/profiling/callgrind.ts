// Instructions a request, counted by valgrind's callgrind: immune to the other jobs of a
// shared machine, unlike any time. Each side (a compiled server, with its environment)
// runs under valgrind without instrumentation until warm, then the c = 50 PUT load runs
// with the counters zeroed before and dumped after; the count is divided by the answers.
// Under callgrind a server is some hundred times slower: the load is c = 8 (default) with
// a long time-out, which keeps it saturated and its group commits full, alike for every
// side; what differs between sides is the work each request does.
//   npx tsx bench/profiling/callgrind.ts [--seconds 20 --warmup 20] 'name=entry[;ENV=value...]' ...
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Command } from 'commander';
import { startStatelog } from '../shared/lib.js';
import { load, prebuilt } from '../shared/load.js';
import { putRequest } from '../writes/write.js';

const program = new Command('bench/profiling/callgrind.ts')
  .argument('<sides...>', 'name=entry[;ENV=value...]')
  .option('--seconds <n>', 'seconds of counted load', Number, 20)
  .option('--warmup <n>', 'seconds of load before counting (JIT warm-up), half without instrumentation and half with', Number, 20)
  .option('--connections <n>', 'concurrent PUTs', Number, 8)
  .option('--out <file>', 'also write the figures as JSON (bench/results/<date>-callgrind.json is shown by bench/shared/report.ts)')
  .option('--note <text...>', 'notes kept with the figures (shown under the table)')
  .parse();
const options = program.opts<{ seconds: number; warmup: number; connections: number; out?: string; note?: string[] }>();
const put = (url: string, seconds: number) => load({ url, connections: options.connections, seconds, requests: prebuilt(putRequest), timeoutSeconds: 120 });

// vgdb finds the server by a file named after $USER and $HOST: the server runs with HOST=127.0.0.1.
const control = (pid: number, ...args: string[]) =>
  execFileSync('callgrind_control', [...args, String(pid)], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, HOST: '127.0.0.1' } });

const results = [];
for (const arg of program.args) {
  const name = arg.slice(0, arg.indexOf('='));
  const [entry, ...envs] = arg.slice(arg.indexOf('=') + 1).split(';');
  const env = Object.fromEntries(envs.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
  const dir = mkdtempSync(join(tmpdir(), 'statelog-callgrind-'));
  // No overload sampling: under valgrind every event-loop turn is slow, and 503s are no PUTs.
  const server = await startStatelog({ STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0', ...env }, {
    entry: entry!,
    output: 'discard',
    startupMs: 600_000,
    // --smc-check: V8 writes machine code into anonymous memory and rewrites it.
    wrapper: ['valgrind', '--tool=callgrind', '--smc-check=all-non-file', '--instr-atstart=no', `--callgrind-out-file=${join(dir, 'callgrind.out')}`],
  });
  let requests: number;
  try {
    const pid = server.proc.pid!;
    await put(server.url, options.warmup / 2);
    // Turning instrumentation on translates all code again: slow for a while, not counted.
    control(pid, '-i', 'on');
    await put(server.url, options.warmup / 2);
    control(pid, '-z');
    const counted = await put(server.url, options.seconds);
    control(pid, '-d');
    requests = counted.requests;
  } finally {
    await server.stop();
  }
  const dumps = readdirSync(dir).filter((f) => /^callgrind\.out\.\d+$/.test(f));
  if (dumps.length === 0) throw new Error(`${name}: callgrind wrote no dump (files: ${readdirSync(dir).join(', ')})`);
  const text = readFileSync(join(dir, dumps.sort()[0]!), 'utf8');
  const total = Number(/^(?:summary|totals):\s+(\d+)/m.exec(text)?.[1]);
  rmSync(dir, { recursive: true, force: true });
  const perRequest = Math.round(total / requests);
  console.log(`${name}: ${requests} requests, ${total.toLocaleString('en-US')} instructions, ${perRequest.toLocaleString('en-US')} a request`);
  results.push({ name, entry, env, requests, instructions: total, instructionsPerRequest: perRequest });
}
if (options.out) {
  mkdirSync(dirname(options.out), { recursive: true });
  const command = `npx tsx bench/profiling/callgrind.ts --seconds ${options.seconds} --warmup ${options.warmup} --connections ${options.connections} ${program.args.map((a) => `'${a}'`).join(' ')}`;
  writeFileSync(options.out, `${JSON.stringify({ at: new Date().toISOString(), command, options: { seconds: options.seconds, warmup: options.warmup, connections: options.connections }, results, notes: options.note ?? [] }, null, 2)}\n`);
}
