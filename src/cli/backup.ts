// `statelog backup`: through the server (its snapshot with the trailer), or a copy of a SQLite file.
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { backupDatabase } from '../store/sqlite/backup.js';
import { CliFailure, EXIT, progressBar, usage, type Cli } from './common.js';
import { writeSnapshot } from './snapshot.js';

export function addBackupCommand(program: Command, cli: Cli): void {
  program
    .command('backup [file]')
    .description('save a consistent backup: through the server at --url (its snapshot with the trailer, from either store; a token without key prefixes), or with --db a copy of a SQLite file')
    .option('--out <file>', 'where the backup goes (or give FILE)')
    .option('--db <file>', 'copy this SQLite database file instead (SQLite backup API, safe while the server runs)')
    .action(async (positional: string | undefined, flags: { out?: string; db?: string }) => {
      const file = flags.out ?? positional;
      if (!file) usage('say where the backup goes: --out FILE');
      if (existsSync(file!)) throw new CliFailure(`${file} exists; choose a new file`, EXIT.refused);
      if (flags.db) {
        const bar = progressBar('backup [{bar}] {percentage}%');
        bar?.start(100, 0);
        const pages = await backupDatabase(flags.db, file!, (done, total) => bar?.update(Math.floor((done / total) * 100)));
        bar?.stop();
        process.stderr.write(`backed up ${pages} pages of ${flags.db} to ${file}\n`);
        return;
      }
      const { count, offset, epoch } = await writeSnapshot(cli, '', file, 'backup');
      process.stderr.write(`backed up ${count} keys at offset ${offset} (epoch ${epoch}) from ${cli.serverUrl()} to ${file}\n`);
    });
}
