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
  /** The generation of the log's history the offset was read under, where the log has one. */
  gen?: string;
  prefix: string;
  entries: [string, T][];
  /** Each entry's record offset, in the same order: what the mirror's digest is made of. */
  offsets?: number[];
  /**
   * The digest those offsets make (16 hex digits), saved so that a restart does not hash
   * every key again; the checksum covers it as it covers the offsets.
   */
  digest?: string;
  /** Each entry's expiry (ms since the epoch; null: none), in the same order. */
  expiries?: (number | null)[];
}

export interface LoadedCheckpoint<T> {
  offset: number;
  epoch: string;
  gen?: string;
  state: Map<string, T>;
  /** Null when the checkpoint was saved without offsets. */
  offsets: Map<string, number> | null;
  /** The saved digest, when the checkpoint has one beside its offsets. */
  digest: bigint | null;
  /** The expiries of the entries that have one. */
  expiries: Map<string, number>;
}

const digest = (bytes: string | Uint8Array) => createHash('sha256').update(bytes).digest('hex');

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
export async function loadCheckpoint<T>(file: string, prefix: string, warn: (message: string) => void): Promise<LoadedCheckpoint<T> | null> {
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') warn(`cannot read checkpoint ${file}: ${String(err)}`);
    return null;
  }
  // The checksum is of the body's bytes, so it is checked before the body is decoded.
  const newline = bytes.indexOf(10);
  if (newline < 0 || digest(bytes.subarray(newline + 1)) !== bytes.toString('latin1', 0, newline)) {
    warn(`checkpoint ${file} is corrupt or truncated; ignoring it`);
    return null;
  }
  const data = JSON.parse(bytes.toString('utf8', newline + 1)) as CheckpointData<T> & { version: number };
  if (data.version !== VERSION || data.prefix !== prefix) {
    warn(`checkpoint ${file} is for another version or prefix; ignoring it`);
    return null;
  }
  const { entries } = data;
  const state = new Map<string, T>();
  const saved = data.offsets?.length === entries.length ? data.offsets : null;
  const offsets = saved ? new Map<string, number>() : null;
  const expiries = new Map<string, number>();
  const savedExpiries = data.expiries?.length === entries.length ? data.expiries : null;
  for (let i = 0; i < entries.length; i++) {
    const [key, value] = entries[i]!;
    state.set(key, value);
    offsets?.set(key, saved![i]!);
    const expiresAt = savedExpiries?.[i];
    if (typeof expiresAt === 'number') expiries.set(key, expiresAt);
  }
  const savedDigest = offsets && typeof data.digest === 'string' && /^[0-9a-f]{16}$/.test(data.digest) ? BigInt(`0x${data.digest}`) : null;
  return { offset: data.offset, epoch: data.epoch, ...(typeof data.gen === 'string' ? { gen: data.gen } : {}), state, offsets, digest: savedDigest, expiries };
}
