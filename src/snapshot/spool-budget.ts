// The disk space all snapshot spools may take together, and the spool folder's faults.
import { randomUUID } from 'node:crypto';
import { open, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { databaseUnavailable, type ApiError } from '../contract/errors.js';

/** Bytes a write to the spool: few large writes, each overlapping the next reads (two buffers take turns). */
export const WRITE_BYTES = 1024 * 1024;
/** Bytes spooled before the answer starts (snapshot-spool.ts). */
export const START_BYTES = 4 * 1024 * 1024;
/** The least STATELOG_SPOOL_MAX_BYTES: a snapshot larger than its start must have room to start, a write in flight. */
export const SPOOL_MIN_BYTES = START_BYTES + WRITE_BYTES;

/** A spool as its budget sees it. */
export interface BudgetHolder {
  readonly heldBytes: number;
  /** Whether its readers have started (it can no longer be refused cleanly, only cut). */
  readonly answering: boolean;
  /** Whole and kept for requests to come, with no reader now: dropping it cuts no one. */
  readonly idle: boolean;
  evict(err: ApiError): void;
}

// The bytes all spools may take, given to the oldest first: it takes room back from younger spools
// not yet answering (503 before any byte) or idle ones, so a snapshot within the budget finishes.
export class SpoolBudget {
  private used = 0;
  /** Spools holding bytes or still spooling, oldest first (a Set keeps insertion order). */
  private readonly holders = new Set<BudgetHolder>();
  /** The spool folder's fault (read-only, removed...), while it stands: readiness fails. */
  folderFault: string | null = null;

  constructor(readonly maxBytes: number) {}

  get usedBytes(): number {
    return this.used;
  }

  join(holder: BudgetHolder): void {
    this.holders.add(holder);
  }

  leave(holder: BudgetHolder): void {
    this.holders.delete(holder);
  }

  isOldest(holder: BudgetHolder): boolean {
    for (const other of this.holders) {
      if (other === holder) return true;
      if (!other.idle) return false;
    }
    return false;
  }

  /** Takes `bytes` for `holder`, from younger spools not yet answering if need be; else throws 503. */
  take(bytes: number, holder: BudgetHolder): void {
    if (this.used + bytes > this.maxBytes) this.reclaim(bytes, holder);
    if (this.used + bytes > this.maxBytes) {
      // A snapshot is spooled whole before it is done: one larger than the budget never fits, however fast its reader.
      if (holder.heldBytes + bytes > this.maxBytes) {
        throw databaseUnavailable(
          `the snapshot needs more spool space than STATELOG_SPOOL_MAX_BYTES allows (${this.maxBytes} bytes): a snapshot is spooled whole, so raise STATELOG_SPOOL_MAX_BYTES above the size of the state (or of the prefix) it serves, or take the snapshot by prefix`,
          { reason: 'spool_max_bytes', spoolMaxBytes: this.maxBytes },
        );
      }
      throw databaseUnavailable(`other snapshots being served hold ${this.used - holder.heldBytes} of the ${this.maxBytes} bytes of spool space (STATELOG_SPOOL_MAX_BYTES); retry later`);
    }
    this.used += bytes;
  }

  give(bytes: number): void {
    this.used -= bytes;
  }

  /** Drops idle spools, then refuses the youngest not yet answering, until `bytes` fit. */
  private reclaim(bytes: number, holder: BudgetHolder): void {
    const all = [...this.holders];
    const younger = all.slice(all.indexOf(holder) + 1).reverse();
    const candidates = [...all.filter((other) => other.idle && other !== holder), ...younger.filter((other) => !other.idle)];
    for (const other of candidates) {
      if (this.used + bytes <= this.maxBytes) return;
      if ((other.answering && !other.idle) || other.heldBytes === 0) continue;
      other.evict(databaseUnavailable(`a snapshot needs the spool space (STATELOG_SPOOL_MAX_BYTES, ${this.maxBytes} bytes); retry later`));
    }
  }
}

export function isNoSpace(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG';
}

/** Errors of the spool folder itself (read-only, removed, not permitted): 503, and readiness fails. */
const FOLDER_FAULTS = new Set(['EROFS', 'ENOENT', 'ENOTDIR', 'EACCES', 'EPERM']);

export function folderFault(err: unknown, dir: string): ApiError | null {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string' || !FOLDER_FAULTS.has(code)) return null;
  return databaseUnavailable(`cannot write snapshot spool files in ${dir} (${code}): check STATELOG_SPOOL_DIR`, { reason: 'spool' });
}

/** Throws 503 while the folder's fault stands (readiness asks); a spool file made and removed again clears it. */
export async function checkSpoolFolder(dir: string, budget: SpoolBudget): Promise<void> {
  if (budget.folderFault === null) return;
  const path = join(dir, `.statelog-spool-${randomUUID()}`);
  try {
    await (await open(path, 'w', 0o600)).close();
    await unlink(path);
    budget.folderFault = null;
  } catch (err) {
    throw folderFault(err, dir) ?? err;
  }
}
