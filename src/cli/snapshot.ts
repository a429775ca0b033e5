// `statelog snapshot`: a consistent snapshot as NDJSON with its trailer, as backup and restore write it.
import { existsSync, renameSync, rmSync, type WriteStream } from 'node:fs';
import type { Command } from 'commander';
import { LinesHash } from '../backup-file.js';
import { closeOut, openOut, progressBar, writeLine, type Cli } from './common.js';

/** Writes a snapshot to FILE (or stdout), renamed into place once its trailer checked out: a cut one never passes for whole. */
export async function writeSnapshot(cli: Cli, prefix: string, file: string | undefined, label: string): Promise<{ count: number; offset: number; epoch: string }> {
  const api = cli.client();
  const partial = file && `${file}.partial`;
  const out = partial ? await openOut(partial, file) : process.stdout;
  try {
    const total = prefix === '' && (label === 'backup' || (file && process.stderr.isTTY)) ? Number((await api.stats()).liveKeys) : 0;
    const snapshot = await api.snapshotLines({ prefix });
    const bar = file ? progressBar(`${label} [{bar}] {value}/{total} keys`) : null;
    bar?.start(Math.max(total, 1), 0);
    const lines = new LinesHash();
    for await (const line of snapshot) {
      lines.add(line);
      await writeLine(out, line);
      if (bar && snapshot.count > bar.getTotal()) bar.setTotal(snapshot.count);
      bar?.increment();
    }
    bar?.stop();
    const { offset, count, epoch, digest } = snapshot;
    await writeLine(out, JSON.stringify({ end: true, offset, count, epoch, ...(digest !== undefined ? { digest } : {}), sha256: lines.hex() }));
    if (partial) {
      await closeOut(out as WriteStream, file);
      renameSync(partial, file);
    }
    return { count: snapshot.count, offset: snapshot.offset, epoch: snapshot.epoch };
  } finally {
    if (partial && existsSync(partial)) rmSync(partial, { force: true });
  }
}


export function addSnapshotCommand(program: Command, cli: Cli): void {
  program
    .command('snapshot')
    .description('write a consistent snapshot as NDJSON (entries, then the trailer line)')
    .option('--prefix <prefix>', 'only keys with this prefix', '')
    .option('--out <file>', 'write to FILE instead of stdout')
    .action(async (flags: { prefix: string; out?: string }) => {
      const { count, offset } = await writeSnapshot(cli, flags.prefix, flags.out, 'snapshot');
      process.stderr.write(`${count} keys at offset ${offset}\n`);
    });
}
