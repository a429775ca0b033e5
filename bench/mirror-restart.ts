// How long a worker's StateMirror takes to become ready again from its checkpoint,
// against taking a fresh snapshot (issue 6's part of npm run bench:recovery).
// A server with 100,000 keys; a mirror syncs and saves its checkpoint; then, in rounds,
// a new mirror starts from that checkpoint (reading only changes) and one starts without
// it (snapshot=true). Target: ready from the checkpoint in <= 1 s.
//   npx tsx bench/mirror-restart.ts   (settings: BENCH_KEYS, BENCH_RUNS)
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StateMirror, StatelogClient } from '@statelog/client';
import { mkdirSync, writeFileSync } from 'node:fs';
import { envNumber, ROOT, startStatelog, summary } from './lib.js';

const keys = envNumber('BENCH_KEYS', 100_000);
const rounds = envNumber('BENCH_RUNS', 3);

async function readyIn(options: ConstructorParameters<typeof StateMirror>[0]): Promise<{ ms: number; size: number }> {
  const { head } = (await new StatelogClient({ url: options.url }).stats()) as { head: number };
  const started = performance.now();
  const mirror = new StateMirror(options);
  await mirror.ready;
  const ms = performance.now() - started;
  // Not timed: let it apply what was written meanwhile, so both mirrors can be compared.
  while (mirror.offset < head) await new Promise((resolve) => setTimeout(resolve, 5));
  const size = mirror.size;
  await mirror.close();
  return { ms, size };
}

const server = await startStatelog({ STATELOG_SYNC: 'normal' });
try {
  const client = new StatelogClient({ url: server.url });
  for (let i = 0; i < keys; i += 1000) {
    const batch = Array.from({ length: Math.min(1000, keys - i) }, (_, j) => ({
      key: `item/${String(i + j).padStart(7, '0')}`,
      value: { stock: (i + j) % 97, warehouse: 'north', updated: 1764400000000 + i + j },
    }));
    await client.batch(batch);
  }
  const checkpoint = join(mkdtempSync(join(tmpdir(), 'statelog-mirror-bench-')), 'mirror.checkpoint');
  const warn = () => {};
  await readyIn({ url: server.url, checkpoint, warn }); // syncs, and close() saves the checkpoint

  const fromCheckpoint: number[] = [];
  const fromSnapshot: number[] = [];
  for (let round = 0; round < rounds; round++) {
    await client.put('item/changed', { stock: round }); // a change to catch up on
    const resumed = await readyIn({ url: server.url, checkpoint, warn });
    const fresh = await readyIn({ url: server.url, warn });
    if (resumed.size !== fresh.size) throw new Error(`mirror sizes differ: ${resumed.size} vs ${fresh.size}`);
    fromCheckpoint.push(resumed.ms);
    fromSnapshot.push(fresh.ms);
    console.log(`round ${round + 1}: ready from checkpoint ${resumed.ms.toFixed(0)} ms, from snapshot ${fresh.ms.toFixed(0)} ms (${fresh.size} keys)`);
  }
  const result = {
    settings: { keys, rounds },
    readyFromCheckpointMs: summary(fromCheckpoint),
    readyFromSnapshotMs: summary(fromSnapshot),
    target: 'ready from a checkpoint of 100,000 keys in <= 1000 ms',
  };
  console.log(
    `mirror ready from checkpoint: median ${result.readyFromCheckpointMs.median.toFixed(0)} ms; from snapshot ${result.readyFromSnapshotMs.median.toFixed(0)} ms`,
  );
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${new Date().toISOString().slice(0, 10)}-mirror-restart.json`);
  writeFileSync(file, `${JSON.stringify({ name: 'mirror-restart', at: new Date().toISOString(), ...result }, null, 2)}\n`);
  console.log(`written to ${file}`);
} finally {
  await server.stop();
}
