// `statelog get`: a key's value.
import { StatelogError } from '@statelog/client';
import type { Command } from 'commander';
import { print, type Cli } from './common.js';

export function addGetCommand(program: Command, cli: Cli): void {
  program
    .command('get <key>')
    .description('print a key\'s value as JSON (exit 1 if it has none)')
    .option('--full', 'print key, value, offset and ts')
    .action(async (key: string, flags: { full?: boolean }) => {
      const entry = await cli.client().get(key);
      if (!entry) throw new StatelogError(404, 'not_found', `${key}: no live value`);
      print(flags.full ? entry : entry.value);
    });
}
