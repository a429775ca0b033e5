// `statelog del`: delete a key, on a condition if asked.
import type { Command } from 'commander';
import { offsetOption, print, type Cli } from './common.js';

export function addDelCommand(program: Command, cli: Cli): void {
  program
    .command('del <key>')
    .description('delete a key (exit 1 if it has no live value)')
    .option('--if-match <offset>', 'only if the key\'s live record has this offset', offsetOption)
    .action(async (key: string, flags: { ifMatch?: number }) => {
      print(await cli.client().delete(key, flags.ifMatch !== undefined ? { ifMatch: flags.ifMatch } : {}));
    });
}
