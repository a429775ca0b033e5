// `statelog ls`: the live keys in byte order.
import type { Command } from 'commander';
import { writeLine, type Cli } from './common.js';

export function addLsCommand(program: Command, cli: Cli): void {
  program
    .command('ls')
    .description('list live keys in byte order, one JSON line each')
    .option('--prefix <prefix>', 'only keys with this prefix', '')
    .option('--keys-only', 'print only the keys')
    .action(async (flags: { prefix: string; keysOnly?: boolean }) => {
      for await (const entry of cli.client().list({ prefix: flags.prefix })) {
        await writeLine(process.stdout, flags.keysOnly ? entry.key : JSON.stringify(entry));
      }
    });
}
