// `statelog stats`: the log's statistics.
import type { Command } from 'commander';
import { print, type Cli } from './common.js';

export function addStatsCommand(program: Command, cli: Cli): void {
  program
    .command('stats')
    .description('print the log\'s statistics')
    .action(async () => {
      print(await cli.client().stats());
    });
}
