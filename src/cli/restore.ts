// `statelog restore`: a backup loaded into an empty server, checked whole first and put
// back on failure; or a SQLite file replaced, offline.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { StatelogError, type StatelogClient } from '@statelog/client';
import type { Command } from 'commander';
import { loadBackup, readBackup, type BackupLimits } from '../backup-file.js';
import { restoreDatabase } from '../store/sqlite/backup.js';
import { CliFailure, EXIT, progressBar, type Cli } from './common.js';
import { writeSnapshot } from './snapshot.js';

export function addRestoreCommand(program: Command, cli: Cli): void {
  program
    .command('restore <file>')
    .description('load a backup into an empty server at --url, in batches; or with --db replace a SQLite file, offline')
    .option('--force', 'load into a server that has keys: afterwards it holds exactly the backup\'s keys')
    .option('--db <file>', 'replace this SQLite database with a file made by backup --db (server stopped); the restored log gets a new epoch')
    .action(async (file: string, flags: { force?: boolean; db?: string }) => {
      if (flags.db) {
        const epoch = await restoreDatabase(file, flags.db);
        process.stderr.write(`restored ${file} to ${flags.db} with epoch ${epoch}\n`);
        return;
      }
      const api = cli.client();
      const url = cli.serverUrl();
      const stats = (await api.stats()) as { liveKeys: number; maxValueBytes?: number; maxBatchBytes?: number };
      const limits: BackupLimits = { maxValueBytes: stats.maxValueBytes ?? null, maxBatchBytes: stats.maxBatchBytes ?? null };
      // The whole file is checked, against itself and the server's limits, before anything is written.
      let total = 0;
      const check = readBackup(file, limits);
      for (let next = await check.next(); !next.done; next = await check.next()) total += 1;
      const live = stats.liveKeys;
      if (live > 0 && !flags.force) {
        throw new CliFailure(`${url} has ${live} live keys: restore loads into an empty server (--force to replace its keys)`, EXIT.refused);
      }
      // What the server holds now, so that a restore that fails midway can put it back.
      const before = live > 0 ? join(mkdtempSync(join(tmpdir(), 'statelog-restore-')), 'before.ndjson') : null;
      if (before) await writeSnapshot(cli, '', before, 'saving the server\'s keys first');
      const bar = progressBar('restore [{bar}] {percentage}% {value}/{total} keys');
      bar?.start(total, 0);
      let result;
      try {
        result = await loadBackup(api, file, limits, { replace: live > 0, progress: (items) => bar?.increment(items) });
      } catch (err) {
        bar?.stop();
        throw await putBack(api, before, limits, err);
      }
      bar?.stop();
      if (before) rmSync(dirname(before), { recursive: true, force: true });
      const epoch = ((await api.stats()) as { epoch?: string }).epoch;
      const extra = `${result.removed > 0 ? `, deleted ${result.removed} keys it did not have` : ''}${result.expired > 0 ? `, left out ${result.expired} keys past their expiry` : ''}`;
      process.stderr.write(`restored ${result.written} keys from ${file} to ${cli.serverUrl()}${extra}; head ${result.offset}${epoch ? ` (epoch ${epoch})` : ''}\n`);
    });
}

/** After a restore failed midway: puts back the keys the server held (`before`, or none); the error to report says if that worked. */
async function putBack(api: StatelogClient, before: string | null, limits: BackupLimits, cause: unknown): Promise<Error> {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const code = cause instanceof StatelogError && !cause.isConnectionError ? `${cause.code}: ` : '';
  try {
    await loadBackup(api, before, limits, { replace: true });
  } catch (err) {
    const saved = before ? `; its keys before are in ${before} (statelog restore --force ${before})` : '';
    return new CliFailure(`the restore failed (${code}${reason}), and the server could not be put back as it was (${(err as Error).message})${saved}`, EXIT.refused);
  }
  if (before) rmSync(dirname(before), { recursive: true, force: true });
  return new CliFailure(`the restore failed (${code}${reason}); the server was put back to the keys it held before`, EXIT.refused);
}
