// `statelog put`: set a key, on a condition if asked.
import type { Command } from 'commander';
import { offsetOption, parseValue, print, readStdin, type Cli } from './common.js';

export function addPutCommand(program: Command, cli: Cli): void {
  program
    .command('put <key> [value]')
    .description('set a key to a JSON value (read from stdin when VALUE is - or missing)')
    .option('--string', 'store VALUE as a string instead of parsing it as JSON')
    .option('--if-match <offset>', 'only if the key\'s live record has this offset', offsetOption)
    .option('--if-absent', 'only if the key has no live value')
    .action(async (key: string, text: string | undefined, flags: { string?: boolean; ifMatch?: number; ifAbsent?: boolean }) => {
      const raw = text === undefined || text === '-' ? (await readStdin()).replace(/\n$/, '') : text;
      const written = await cli.client().put(key, parseValue(raw, Boolean(flags.string)), {
        ...(flags.ifMatch !== undefined ? { ifMatch: flags.ifMatch } : {}),
        ...(flags.ifAbsent ? { ifNoneMatch: '*' as const } : {}),
      });
      print(written);
    });
}
