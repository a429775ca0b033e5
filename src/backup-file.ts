// A logical backup file: the snapshot's lines as the server wrote them, then a trailer with the
// count, offset, epoch, state digest and SHA-256; a restore checks it all before writing anything.
import { createHash, type Hash } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import type { StatelogClient } from '@statelog/client';
import { DigestSum, termOf } from './contract/digest.js';
import { isExpired } from './contract/expiry.js';
import { ApiError } from './contract/errors.js';
import { checkKey } from './contract/key-rules.js';
import { MAX_TTL_MS } from './contract/schemas.js';

export interface BackupTrailer {
  end: true;
  offset: number;
  count: number;
  epoch: string;
  digest?: string;
  /** SHA-256 of the entry lines, each with its newline, in order. */
  sha256?: string;
}

export class LinesHash {
  private readonly hash: Hash = createHash('sha256');

  add(line: string): void {
    this.hash.update(line).update('\n');
  }

  hex(): string {
    return this.hash.digest('hex');
  }
}

export interface BackupEntry {
  key: string;
  /** The batch item without its TTL: `{"key":...,"value":...`, the value's text as the backup holds it. */
  item: string;
  expiresAt: number | null;
}

export interface CheckedBackup {
  trailer: BackupTrailer;
  expired: number;
}

export interface BackupLimits {
  /** The target server's largest value, as JSON text in bytes; null when it does not say. */
  maxValueBytes: number | null;
  /** The target server's largest batch body, in bytes; null when it does not say. */
  maxBatchBytes: number | null;
}

export class BackupError extends Error {}

// Yields a backup's keys, checking as it goes (JSON lines, ascending keys, `limits`, the trailer's
// count, digest and SHA-256); the trailer throws at the end, so read it all before writing.
export async function* readBackup(file: string, limits: BackupLimits): AsyncGenerator<BackupEntry, BackupTrailer> {
  const input = createReadStream(file, 'utf8');
  const failed = new Promise<never>((_, reject) => input.once('error', (err) => reject(new BackupError(`cannot read ${file}: ${err.message.replace(/^E[A-Z]+: /, '')}`))));
  failed.catch(() => {});
  await Promise.race([once(input, 'open'), failed]);
  const lines = new LinesHash();
  const digest = new DigestSum();
  let count = 0;
  let line = 0;
  let lastKey: Buffer | null = null;
  let trailer: BackupTrailer | null = null;
  for await (const text of createInterface({ input, crlfDelay: Infinity })) {
    line += 1;
    if (text.trim() === '') continue;
    const at = `${file}:${line}`;
    if (trailer) throw new BackupError(`${at}: a line after the trailer: not a statelog backup`);
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(text) as Record<string, unknown>;
    } catch {
      throw new BackupError(`${at}: not JSON: not a statelog backup`);
    }
    if (parsed.end === true && typeof parsed.count === 'number' && typeof parsed.offset === 'number') {
      trailer = parsed as unknown as BackupTrailer;
      continue;
    }
    const { key, offset, expiresAt } = parsed;
    if (typeof key !== 'string' || !('value' in parsed) || !Number.isSafeInteger(offset)) {
      throw new BackupError(`${at}: no key, value and offset: not a statelog backup`);
    }
    if (expiresAt !== undefined && !Number.isSafeInteger(expiresAt)) throw new BackupError(`${at}: expiresAt is not a time in ms`);
    try {
      checkKey(key);
    } catch (err) {
      throw new BackupError(`${at}: ${(err as ApiError).message}`);
    }
    const keyBytes = Buffer.from(key, 'utf8');
    if (lastKey && Buffer.compare(lastKey, keyBytes) >= 0) throw new BackupError(`${at}: key ${JSON.stringify(key)} is out of order: the file was changed`);
    lastKey = keyBytes;
    const item = batchItem(text, key, parsed.value);
    const valueBytes = Buffer.byteLength(item, 'utf8') - Buffer.byteLength(`{"key":${JSON.stringify(key)},"value":`, 'utf8');
    if (limits.maxValueBytes !== null && valueBytes > limits.maxValueBytes) {
      throw new BackupError(`${at}: the value of ${JSON.stringify(key)} is ${valueBytes} bytes; the server takes at most ${limits.maxValueBytes} (STATELOG_MAX_VALUE_BYTES)`);
    }
    lines.add(text);
    digest.add(termOf(key, offset as number));
    count += 1;
    yield { key, item, expiresAt: (expiresAt as number | undefined) ?? null };
  }
  if (!trailer) throw new BackupError(`${file} ends without its trailer line: the backup is incomplete`);
  if (trailer.count !== count) throw new BackupError(`${file}: the trailer says ${trailer.count} keys, the file has ${count}`);
  if (trailer.sha256 === undefined || trailer.digest === undefined) {
    throw new BackupError(`${file}: the trailer has no digest to check the lines against: not a backup of this version (take a new one)`);
  }
  if (trailer.sha256 !== lines.hex() || trailer.digest !== digest.hex()) {
    throw new BackupError(`${file}: the lines do not match the trailer's digest: the file was changed or damaged`);
  }
  return trailer;
}

/** The batch item for a backup line, keeping the value's text (and its numbers' digits) as written; without its closing brace. */
function batchItem(line: string, key: string, value: unknown): string {
  const head = `{"key":${JSON.stringify(key)},"value":`;
  const end = line.lastIndexOf(',"offset":');
  if (line.startsWith(head) && end > head.length) return line.slice(0, end);
  const whole = JSON.stringify({ key, value });
  return whole.slice(0, -1);
}

export function restoreItem(entry: BackupEntry, now: number): string | null {
  if (entry.expiresAt === null) return `${entry.item}}`;
  if (isExpired(entry.expiresAt, now)) return null;
  return `${entry.item},"ttlMs":${Math.min(entry.expiresAt - now, MAX_TTL_MS)}}`;
}

/** Items per batch, and bytes of JSON per batch when the server does not say its limit. */
const RESTORE_BATCH_ITEMS = 500;
const RESTORE_BATCH_BYTES = 512 * 1024;
const BATCH_ENVELOPE_BYTES = 64;

export interface LoadResult {
  written: number;
  expired: number;
  removed: number;
  offset: number;
}

/** Writes a checked backup's keys in batches; with `replace`, then deletes the keys the file has not. */
export async function loadBackup(
  api: StatelogClient,
  file: string | null,
  limits: BackupLimits,
  options: { replace: boolean; progress?: (items: number) => void },
): Promise<LoadResult> {
  const result: LoadResult = { written: 0, expired: 0, removed: 0, offset: 0 };
  const restored = new Set<string>();
  const maxBytes = Math.min(RESTORE_BATCH_BYTES, (limits.maxBatchBytes ?? Infinity) - BATCH_ENVELOPE_BYTES);
  let batch: string[] = [];
  let bytes = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    result.offset = (await api.batchJson(batch)).offset;
    options.progress?.(batch.length);
    batch = [];
    bytes = 0;
  };
  if (file !== null) {
    for await (const entry of readBackup(file, limits)) {
      const item = restoreItem(entry, Date.now());
      if (item === null) {
        result.expired += 1;
        continue;
      }
      // Each item also costs its comma.
      const size = Buffer.byteLength(item, 'utf8') + 1;
      if (batch.length >= RESTORE_BATCH_ITEMS || (batch.length > 0 && bytes + size > maxBytes)) await flush();
      batch.push(item);
      bytes += size;
      result.written += 1;
      if (options.replace) restored.add(entry.key);
    }
  }
  await flush();
  if (options.replace) {
    for await (const entry of api.list()) {
      if (restored.has(entry.key)) continue;
      if (batch.length >= RESTORE_BATCH_ITEMS) await flush();
      batch.push(JSON.stringify({ key: entry.key, op: 'delete' }));
      result.removed += 1;
    }
    await flush();
  }
  return result;
}
