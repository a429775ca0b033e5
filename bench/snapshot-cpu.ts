// The server's CPU time for one whole snapshot, which holds up on a busy machine where
// wall-clock keys/s does not: seeds KEYS live keys once (as bench/snapshot.ts does), then
// for each round starts every named server entry in turn and reads its whole snapshot,
// reporting the server process's CPU time (from /proc), the reading client's, the time
// to the first byte (spooling) and the whole read. Medians at the end.
//   npx tsx bench/snapshot-cpu.ts [--keys N] [--rounds R] [name=entry ...]
// An entry is a server file (default src/server.ts), e.g. a copy of another commit's
// sources: `git archive REV | tar -x -C /tmp/rev` with node_modules linked in, then
// 'before=/tmp/rev/src/server.ts' 'after=src/server.ts'. SNAPSHOT_CPU_DIR keeps the
// seeded database between runs (default: the temp folder).
import http from 'node:http';
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { seedLiveKeys } from '../harness/seed-db.js';
import { median } from './lib.js';
import { startServer } from './server-process.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number): number => {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args.splice(at, 2)[1]) : fallback;
};
const keys = flag('--keys', 1_000_000);
const rounds = flag('--rounds', 5);
const sides = (args.length > 0 ? args : ['as built=src/server.ts']).map((arg) => {
  const at = arg.indexOf('=');
  return at < 0 ? [arg, arg] : [arg.slice(0, at), arg.slice(at + 1)];
}) as [string, string][];

const dir = process.env.SNAPSHOT_CPU_DIR ?? join(tmpdir(), 'statelog-snapshot-cpu');
mkdirSync(dir, { recursive: true });
const dbPath = join(dir, `snapshot-${keys}.db`);
if (!existsSync(dbPath)) seedLiveKeys(dbPath, { count: keys, value: (i) => `{"n":${i},"name":"user ${i}","active":${i % 2 === 0}}` });

/** Reads a snapshot, counting its lines; resolves with them and the time to the first byte. */
function read(base: string, query = ''): Promise<{ lines: number; firstByteMs: number }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    http
      .get(`${base}/v1/snapshot${query}`, { agent: false }, (res) => {
        const firstByteMs = performance.now() - started;
        if (res.statusCode !== 200) reject(new Error(`snapshot answered ${res.statusCode}`));
        let lines = 0;
        res.on('data', (chunk: Buffer) => {
          for (let at = chunk.indexOf(10); at >= 0; at = chunk.indexOf(10, at + 1)) lines += 1;
        });
        res.on('end', () => resolve({ lines, firstByteMs }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

const results = new Map<string, { server: number[]; client: number[]; firstByte: number[]; wall: number[] }>();
for (let round = 0; round < rounds; round++) {
  for (const [name, entry] of sides) {
    // No load shedding: a busy machine must not turn the warm-up into a 503.
    const server = await startServer({ STATELOG_DB: dbPath, STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' }, entry);
    try {
      await read(server.base, '?prefix=warm-up');
      await new Promise((resolve) => setTimeout(resolve, 300));
      const serverCpu = server.cpuSeconds();
      const clientCpu = process.cpuUsage();
      const started = performance.now();
      const { lines, firstByteMs } = await read(server.base);
      const wall = (performance.now() - started) / 1000;
      const client = process.cpuUsage(clientCpu);
      const used = server.cpuSeconds() - serverCpu;
      if (lines !== keys + 1) throw new Error(`${name}: ${lines} lines for ${keys} keys`);
      const side = results.get(name) ?? { server: [], client: [], firstByte: [], wall: [] };
      results.set(name, side);
      side.server.push(used);
      side.client.push((client.user + client.system) / 1e6);
      side.firstByte.push(firstByteMs / 1000);
      side.wall.push(wall);
      console.log(
        `round ${round + 1} ${name}: server CPU ${used.toFixed(3)} s, client CPU ${side.client.at(-1)!.toFixed(3)} s, ` +
          `first byte ${(firstByteMs / 1000).toFixed(3)} s, whole ${wall.toFixed(3)} s`,
      );
    } finally {
      await server.stop();
    }
  }
}
for (const [name, side] of results) {
  console.log(
    `${name}: median server CPU ${median(side.server).toFixed(3)} s, client CPU ${median(side.client).toFixed(3)} s, ` +
      `first byte ${median(side.firstByte).toFixed(3)} s, whole ${median(side.wall).toFixed(3)} s (${rounds} rounds, ${keys} keys)`,
  );
}
