// `statelog compact`: a compaction run now.
import type { Command } from 'commander';
import { print, type Cli } from './common.js';

export function addCompactCommand(program: Command, cli: Cli): void {
  program
    .command('compact')
    .description('run a compaction now (admin token)')
    .action(async () => {
      print(await cli.client().compact());
    });
}
