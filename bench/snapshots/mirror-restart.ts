// How long a worker's StateMirror takes to become ready again from its checkpoint,
// against taking a fresh snapshot. A server with 100,000 keys; a mirror syncs and saves
// its checkpoint; then, in rounds, a new mirror starts from that checkpoint (reading only
// changes) and one starts without it (snapshot=true). Target: ready from the checkpoint
// in <= 0.3 s.
//   npm run bench -- --only mirror      (BENCH_KEYS sets the number of keys)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StateMirror, StatelogClient } from '@statelog/client';
import type { Figure } from '../shared/figure.js';
import { envNumber, startStatelog } from '../shared/lib.js';

async function readyIn(options: ConstructorParameters<typeof StateMirror>[0]): Promise<{ ms: number; cpuMs: number; size: number }> {
  const { head } = (await new StatelogClient({ url: options.url }).stats()) as { head: number };
  const started = performance.now();
  const cpu = process.cpuUsage();
  const mirror = new StateMirror(options);
  await mirror.ready;
  const ms = performance.now() - started;
  // This process's CPU time until ready: the mirror's own work, which a busy machine
  // stretches in wall time but hardly changes.
  const used = process.cpuUsage(cpu);
  const cpuMs = (used.user + used.system) / 1000;
  // Not timed: let it apply what was written meanwhile, so both mirrors can be compared.
  while (mirror.offset < head) await new Promise((resolve) => setTimeout(resolve, 5));
  const size = mirror.size;
  await mirror.close();
  return { ms, cpuMs, size };
}

export const mirrorFigure: Figure = {
  name: 'mirror',
  title: 'StateMirror restart: ready from its checkpoint against from a snapshot',
  async run(settings) {
    const keys = settings.smoke ? 2_000 : envNumber('BENCH_KEYS', 100_000);
    const server = await startStatelog({ STATELOG_SYNC: 'normal' });
    const dir = mkdtempSync(join(tmpdir(), 'statelog-mirror-bench-'));
    const fromCheckpoint: number[] = [];
    const fromSnapshot: number[] = [];
    const checkpointCpu: number[] = [];
    try {
      const client = new StatelogClient({ url: server.url });
      for (let i = 0; i < keys; i += 1000) {
        const batch = Array.from({ length: Math.min(1000, keys - i) }, (_, j) => ({
          key: `item/${String(i + j).padStart(7, '0')}`,
          value: { stock: (i + j) % 97, warehouse: 'north', updated: 1764400000000 + i + j },
        }));
        await client.batch(batch);
      }
      const checkpoint = join(dir, 'mirror.checkpoint');
      const warn = () => {};
      await readyIn({ url: server.url, checkpoint, warn }); // syncs, and close() saves the checkpoint
      for (let round = 0; round < settings.rounds; round++) {
        await client.put('item/changed', { stock: round }); // a change to catch up on
        const resumed = await readyIn({ url: server.url, checkpoint, warn });
        const fresh = await readyIn({ url: server.url, warn });
        if (resumed.size !== fresh.size) throw new Error(`mirror sizes differ: ${resumed.size} vs ${fresh.size}`);
        fromCheckpoint.push(resumed.ms);
        checkpointCpu.push(resumed.cpuMs);
        fromSnapshot.push(fresh.ms);
        settings.log(`round ${round + 1}: ready from checkpoint ${resumed.ms.toFixed(0)} ms (CPU ${resumed.cpuMs.toFixed(0)} ms), from snapshot ${fresh.ms.toFixed(0)} ms (${fresh.size} keys)`);
      }
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
    return {
      scale: `${keys.toLocaleString()} keys (small objects), one change to catch up on each round, STATELOG_SYNC=normal`,
      settings: { keys, rounds: settings.rounds },
      metrics: [
        { label: 'ready from the checkpoint', unit: 's', values: fromCheckpoint.map((ms) => ms / 1000), target: { op: '<=', value: 0.3 }, digits: 3 },
        { label: 'ready from the checkpoint: client CPU', unit: 's', values: checkpointCpu.map((ms) => ms / 1000), digits: 3 },
        { label: 'ready from a snapshot', unit: 's', values: fromSnapshot.map((ms) => ms / 1000), digits: 3 },
      ],
    };
  },
};
