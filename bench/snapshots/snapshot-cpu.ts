// The server's CPU time for one whole snapshot, which holds up on a busy machine where
// wall-clock keys/s does not: seeds KEYS live keys once (as bench/snapshots/snapshot.ts does), then
// for each round starts every named server entry in turn and reads its whole snapshot,
// reporting the server process's CPU time (from /proc), the reading client's (a process
// of its own, bench/snapshots/snapshot-reader.mjs), the time to the first byte (spooling) and the
// whole read. Medians at the end.
//   npx tsx bench/snapshots/snapshot-cpu.ts [--keys N] [--rounds R] [name=entry ...]
// An entry is a server file (default src/server.ts), e.g. a copy of another commit's
// sources: `git archive REV | tar -x -C /tmp/rev` with node_modules linked in, then
// 'before=/tmp/rev/src/server.ts' 'after=src/server.ts'. SNAPSHOT_CPU_DIR keeps the
// seeded database between runs (default: the temp folder).
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { seedLiveKeys } from '../../harness/seed-db.js';
import { median } from '../shared/lib.js';
import { startServer } from '../shared/server-process.js';
import { readSnapshot } from './snapshot.js';

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

const results = new Map<string, { server: number[]; client: number[]; firstByte: number[]; wall: number[] }>();
for (let round = 0; round < rounds; round++) {
  for (const [name, entry] of sides) {
    // No load shedding: a busy machine must not turn the warm-up into a 503.
    const server = await startServer({ STATELOG_DB: dbPath, STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' }, entry);
    try {
      await readSnapshot(server.base, '?prefix=warm-up');
      await new Promise((resolve) => setTimeout(resolve, 300));
      const serverCpu = server.cpuSeconds();
      const { lines, firstByteSeconds, seconds: wall, cpuSeconds: client } = await readSnapshot(server.base);
      const used = server.cpuSeconds() - serverCpu;
      if (lines !== keys + 1) throw new Error(`${name}: ${lines} lines for ${keys} keys`);
      const side = results.get(name) ?? { server: [], client: [], firstByte: [], wall: [] };
      results.set(name, side);
      side.server.push(used);
      side.client.push(client);
      side.firstByte.push(firstByteSeconds);
      side.wall.push(wall);
      console.log(
        `round ${round + 1} ${name}: server CPU ${used.toFixed(3)} s, client CPU ${side.client.at(-1)!.toFixed(3)} s, ` +
          `first byte ${firstByteSeconds.toFixed(3)} s, whole ${wall.toFixed(3)} s`,
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
