// Instructions a request, counted by valgrind's callgrind: immune to the other jobs of a
// shared machine, unlike any time. Each side (a compiled server, with its environment)
// runs under valgrind without instrumentation until warm, then the c = 50 PUT load runs
// with the counters zeroed before and dumped after; the count is divided by the answers.
// Under valgrind a server is some 50 times slower, so c = 50 keeps it saturated and every
// group commit full, alike for every side.
//   npx tsx bench/callgrind.ts [--seconds 20 --warmup 20] 'name=entry[;ENV=value...]' ...
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Command } from 'commander';
import { startStatelog } from './lib.js';
import { loadOf } from './load.js';
import { putRequest } from './write.js';

const program = new Command('bench/callgrind.ts')
  .argument('<sides...>', 'name=entry[;ENV=value...]')
  .option('--seconds <n>', 'seconds of counted load', Number, 20)
  .option('--warmup <n>', 'seconds of load before counting (JIT warm-up)', Number, 20)
  .option('--out <file>', 'also write the figures as JSON')
  .parse();
const options = program.opts<{ seconds: number; warmup: number; out?: string }>();

const control = (pid: number, ...args: string[]) => execFileSync('callgrind_control', [...args, String(pid)], { stdio: ['ignore', 'inherit', 'inherit'] });

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
    await loadOf(server.url, 50, options.warmup, putRequest);
    control(pid, '-i', 'on');
    await loadOf(server.url, 50, 2, putRequest);
    control(pid, '-z');
    const load = await loadOf(server.url, 50, options.seconds, putRequest);
    control(pid, '-d');
    requests = load.requests;
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
  writeFileSync(options.out, `${JSON.stringify({ at: new Date().toISOString(), options, results }, null, 2)}\n`);
}
