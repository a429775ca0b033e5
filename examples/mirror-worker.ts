// A worker that keeps statelog's inventory in memory with a StateMirror, reacts to
// each change, and restarts from its checkpoint file without taking a new snapshot.
//
//   STATELOG_URL=http://127.0.0.1:8080 npx tsx examples/mirror-worker.ts ./inventory.checkpoint
//
// It prints one JSON line when it is ready, one per change, and a summary on SIGTERM or
// SIGINT, after saving its checkpoint.
import { StateMirror, type LogRecord, type ResetEvent } from '@statelog/client';

interface Stock {
  count: number;
}

const checkpoint = process.argv[2] ?? './inventory.checkpoint';
const mirror = new StateMirror<Stock>({
  url: process.env.STATELOG_URL ?? 'http://127.0.0.1:8080',
  token: process.env.STATELOG_TOKEN,
  prefix: 'inventory/',
  checkpoint,
  checkpointIntervalMs: 1_000,
});

const print = (line: object) => process.stdout.write(`${JSON.stringify(line)}\n`);
const totalStock = () => [...mirror.entries()].reduce((sum, [, stock]) => sum + (stock?.count ?? 0), 0);

mirror.on('change', (record: LogRecord<Stock>) => {
  if (record.op === 'set' && record.value.count === 0) print({ event: 'sold-out', key: record.key, offset: record.offset });
  else print({ event: record.op, key: record.key, offset: record.offset });
});
mirror.on('reset', (event: ResetEvent) => print({ event: 'reset', reason: event.reason, items: mirror.size }));

await mirror.ready;
print({ event: 'ready', offset: mirror.offset, items: mirror.size, stock: totalStock() });

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, async () => {
    await mirror.close();
    print({ event: 'stopped', offset: mirror.offset, items: mirror.size, stock: totalStock() });
    process.exit(0);
  });
}
