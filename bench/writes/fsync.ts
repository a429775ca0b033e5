// How this machine's disk serves overlapping fsyncs, the fact behind wal-syncer.ts's
// MAX_IN_FLIGHT: appends of one WAL-sized write and an fdatasync each, by 1, 2, 3 and 4
// concurrent writers, alternating, several rounds; reports the time per fsync.
//   npx tsx bench/writes/fsync.ts [rounds]
import { open } from 'node:fs/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { median, saveResult } from '../shared/lib.js';

const ROUNDS = Number(process.argv[2] ?? 3);
const FSYNCS = 1000;
const WRITE_BYTES = 32 * 1024;
const CONCURRENCY = [1, 2, 3, 4];

const dir = mkdtempSync(join(tmpdir(), 'statelog-fsync-'));
const file = await open(join(dir, 'wal'), 'w');
const chunk = Buffer.alloc(WRITE_BYTES, 1);
let position = 0;

/** Milliseconds per fsync with `writers` appending and fsyncing at once. */
async function measure(writers: number): Promise<number> {
  let done = 0;
  const started = performance.now();
  const writer = async (): Promise<void> => {
    while (done < FSYNCS) {
      done += 1;
      const at = position;
      position += WRITE_BYTES;
      await file.write(chunk, 0, WRITE_BYTES, at);
      await file.datasync();
    }
  };
  await Promise.all(Array.from({ length: writers }, writer));
  return (performance.now() - started) / FSYNCS;
}

const perFsync = new Map<number, number[]>(CONCURRENCY.map((n) => [n, []]));
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const writers of CONCURRENCY) perFsync.get(writers)!.push(await measure(writers));
  }
} finally {
  await file.close();
  rmSync(dir, { recursive: true, force: true });
}
const result = {
  bench: 'fsync',
  at: new Date().toISOString(),
  settings: { rounds: ROUNDS, fsyncs: FSYNCS, writeBytes: WRITE_BYTES },
  msPerFsync: Object.fromEntries([...perFsync].map(([writers, values]) => [writers, { median: median(values), values }])),
};
saveResult('fsync', result);
for (const [writers, values] of perFsync) console.log(`${writers} at once: ${median(values).toFixed(3)} ms per fsync`);
