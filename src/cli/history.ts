// `statelog history`: a key's records still in the log.
import type { Command } from 'commander';
import { offsetOption, print, type Cli } from './common.js';

export function addHistoryCommand(program: Command, cli: Cli): void {
  program
    .command('history <key>')
    .description('print the key\'s records still in the log, newest first, one JSON line each')
    .option('--limit <n>', 'at most this many records (1 to 1000)', offsetOption, 100)
    .option('--before <offset>', 'only records below this offset (a previous run\'s "next")', offsetOption)
    .action(async (key: string, flags: { limit: number; before?: number }) => {
      const page = await cli.client().history(key, { limit: flags.limit, ...(flags.before !== undefined ? { before: flags.before } : {}) });
      for (const record of page.records) print(record);
      if (page.next !== null) process.stderr.write(`more: --before ${page.next}\n`);
    });
}
