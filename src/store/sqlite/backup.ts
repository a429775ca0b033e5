// Online backup and offline restore of the SQLite database (`statelog backup`, `statelog restore`).
import { copyFileSync, existsSync, renameSync, rmSync } from 'node:fs';
import Database from 'better-sqlite3';

/** Pages copied per step: small enough for progress, large enough to finish quickly. */
const PAGES_PER_STEP = 4096;

/** SQLite's backup API: it never blocks the server's writes, and restarts if they change the file, so the copy is one state. */
export async function backupDatabase(
  source: string,
  destination: string,
  progress: (done: number, total: number) => void = () => {},
): Promise<number> {
  if (!existsSync(source)) throw new Error(`no database at ${source}`);
  if (existsSync(destination)) throw new Error(`${destination} exists; choose a new file`);
  const db = new Database(source, { readonly: true, fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    const result = await db.backup(destination, {
      progress: ({ totalPages, remainingPages }) => {
        progress(totalPages - remainingPages, totalPages);
        return PAGES_PER_STEP;
      },
    });
    progress(result.totalPages, result.totalPages);
    return result.totalPages;
  } finally {
    db.close();
  }
}

function unused(path: string): boolean {
  const db = new Database(path, { timeout: 0 });
  try {
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
    db.exec('COMMIT');
    return true;
  } catch {
    return false;
  } finally {
    db.close();
  }
}

/** Replaces `target` with the backup `file`, offline, under a new epoch: its offsets may repeat ones readers saw. */
export async function restoreDatabase(file: string, target: string): Promise<string> {
  const backup = new Database(file, { readonly: true, fileMustExist: true });
  try {
    const check = backup.pragma('quick_check', { simple: true });
    if (check !== 'ok') throw new Error(`${file} is damaged: ${String(check)}`);
    backup.prepare('SELECT head, epoch FROM meta WHERE id = 1').get();
  } catch (err) {
    throw new Error(`${file} is not a statelog backup: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  } finally {
    backup.close();
  }
  if (existsSync(target) && !unused(target)) {
    throw new Error(`${target} is in use: stop the server before restoring`);
  }

  const staged = `${target}.restoring`;
  copyFileSync(file, staged);
  const db = new Database(staged);
  let epoch: string;
  try {
    db.pragma('journal_mode = WAL');
    epoch = db.prepare('UPDATE meta SET epoch = lower(hex(randomblob(16))) WHERE id = 1 RETURNING epoch').pluck().get() as string;
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
  for (const suffix of ['-wal', '-shm']) rmSync(`${target}${suffix}`, { force: true });
  renameSync(staged, target);
  return epoch;
}
