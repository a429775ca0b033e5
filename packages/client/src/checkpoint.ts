// A mirror's checkpoint: offset, epoch and state in one JSON file with a checksum,
// written atomically (temporary file, fsync, rename, fsync of the folder) so a crash
// leaves either the old checkpoint or the new one, never half of one.
import { createHash } from 'node:crypto';
import { open, readFile, rename } from 'node:fs/promises';
import { dirname } from 'node:path';

const VERSION = 1;

export interface CheckpointData<T> {
  offset: number;
  epoch: string;
  prefix: string;
  entries: [string, T][];
  /** Each entry's record offset, in the same order: what the mirror's digest is made of. */
  offsets?: number[];
}

const digest = (text: string) => createHash('sha256').update(text).digest('hex');

export async function saveCheckpoint<T>(file: string, data: CheckpointData<T>): Promise<void> {
  const body = JSON.stringify({ version: VERSION, ...data });
  const temporary = `${file}.${process.pid}.tmp`;
  const handle = await open(temporary, 'w');
  try {
    // The checksum line comes first, so a truncated file can never verify.
    await handle.writeFile(`${digest(body)}\n${body}`);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(temporary, file);
  const folder = await open(dirname(file), 'r');
  try {
    await folder.sync();
  } finally {
    await folder.close();
  }
}

/** The saved state, or null (with a warning) when the file is missing, corrupt or for another prefix. */
export async function loadCheckpoint<T>(
  file: string,
  prefix: string,
  warn: (message: string) => void,
): Promise<{ offset: number; epoch: string; state: Map<string, T>; offsets: Map<string, number> | null } | null> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') warn(`cannot read checkpoint ${file}: ${String(err)}`);
    return null;
  }
  const newline = text.indexOf('\n');
  const body = text.slice(newline + 1);
  if (newline < 0 || digest(body) !== text.slice(0, newline)) {
    warn(`checkpoint ${file} is corrupt or truncated; ignoring it`);
    return null;
  }
  const data = JSON.parse(body) as CheckpointData<T> & { version: number };
  if (data.version !== VERSION || data.prefix !== prefix) {
    warn(`checkpoint ${file} is for another version or prefix; ignoring it`);
    return null;
  }
  const offsets = data.offsets?.length === data.entries.length ? new Map(data.entries.map(([key], i) => [key, data.offsets![i]!])) : null;
  return { offset: data.offset, epoch: data.epoch, state: new Map(data.entries), offsets };
}
